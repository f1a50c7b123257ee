"""tierlab's verbs, one module each: parse the options, call one library function, print.
`commands.common` holds the shared plumbing and `commands.options` the options declared once;
`tierlab.cli` registers the verbs on its `main` group."""
