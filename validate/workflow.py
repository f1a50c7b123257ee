"""`tierlab validate`'s workflow as library functions: simulate every measured run, compare,
cover (how many steady steps fall in their predicted 80% range), and write the report's six
files (validate.csv, summary.json, split.json, coverage.json, scatter.png, phases.png); or the
leave-one-class-out table (loco.json). Nothing is printed; `out` None writes nothing."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from tierlab.errors import ConfigError
from tierlab.profiles.load import DEFAULT_SOFTWARE, load_software
from tierlab.safeio import write_json, write_text
from tierlab.validate.compare import EXAMPLE_CASES, Validation, validate_cases
from tierlab.validate.coverage import Covered, coverage, summarize_coverage
from tierlab.validate.loco import LocoReport, loco

REPORT_FILES = ("validate.csv", "summary.json", "split.json", "coverage.json", "scatter.png",
                "phases.png")
"""What `run_validation` writes into `out`."""


@dataclass(frozen=True)
class ValidationRun:
    """A validation's report, the coverage of its predicted ranges, and what it was run with."""

    report: Validation
    """Rows (predicted vs measured per run and metric), summary, train/held-out split."""
    covered: list[Covered]
    """Per run: its steady step time against its predicted 80% range."""
    coverage: dict
    """summarize_coverage(covered): how many runs fall inside their range."""
    software: Any
    """The software profile (profiles.schema.Software) the runs were simulated with."""
    train: tuple[str, ...]
    """The case names its fitted terms were fitted on."""
    files: tuple[Path, ...] = ()
    """The files written (none without `out`)."""

    def to_dict(self) -> dict:
        """The summary as `tierlab validate --json` prints it."""
        return {**self.report.summary, "split": self.report.split, "coverage": self.coverage}


def validation_cases(cases: Iterable[str | Path] = (), example: bool = False) -> list:
    """The run folders to validate: `cases`, or the two runs shipped with tierlab (`example`);
    exactly one of the two, else a ConfigError."""
    cases = list(cases)
    if example == bool(cases):
        raise ConfigError("give measured run folders (CASES) or --example (the runs shipped "
                          "with tierlab), one of the two")
    return cases or [EXAMPLE_CASES]


def run_validation(cases: Sequence[str | Path], software: Any = DEFAULT_SOFTWARE, *,
                   hardware: str | None = None, train: Iterable[str] = (),
                   out: str | Path | None = None) -> ValidationRun:
    """Simulate each measured run under `cases` with `software` (a name or a Software) on its
    calibrated profile (`hardware`, else the one its folder's validate.yaml names), compare with
    what was measured, and write the report's files into `out` (REPORT_FILES). `train`: the
    cases the fitted terms were fitted on (default: the software profile's train_cases)."""
    from tierlab.validate.plot_style import save
    from tierlab.validate.report import phase_bars_figure, scatter_figure

    sw = load_software(software) if isinstance(software, str) else software
    train = tuple(train) or tuple(sw.train_cases)
    report = validate_cases(cases, sw, hardware=hardware, train=train)
    files: list[Path] = []
    if out is not None:
        out_dir = Path(out)
        write_text(out_dir / "validate.csv", report.csv())
        write_json(out_dir / "summary.json", report.summary)
        write_json(out_dir / "split.json", report.split)
        files += [out_dir / "validate.csv", out_dir / "summary.json", out_dir / "split.json"]
        files += save(scatter_figure(report.rows, scenarios=report.scenarios),
                      out_dir / "scatter.png")
        files += save(phase_bars_figure(report.rows, scenarios=report.scenarios),
                      out_dir / "phases.png")
    covered = coverage(cases, sw, hardware=hardware)
    ranges = summarize_coverage(covered)
    if out is not None:
        write_json(Path(out) / "coverage.json", {**ranges, "runs": [c.to_dict() for c in covered]})
        files.append(Path(out) / "coverage.json")
    return ValidationRun(report=report, covered=covered, coverage=ranges, software=sw,
                         train=train, files=tuple(files))


def run_loco_validation(cases: Sequence[str | Path], software: Any = DEFAULT_SOFTWARE, *,
                        hardware: str | None = None, pool: str | Sequence[str] = "train",
                        classes: Iterable[str] = (), strict: bool = False,
                        out: str | Path | None = None) -> LocoReport:
    """Leave-one-class-out (validate/loco.py): per class of runs, refit the software profile
    without it and predict its runs; `pool`: "train" (its train_cases), "all", or case names.
    Writes loco.json into `out`."""
    sw = load_software(software) if isinstance(software, str) else software
    report = loco(cases, sw, pool=pool, classes=list(classes) or None, hardware=hardware,
                  strict=strict)
    if out is not None:
        write_json(Path(out) / "loco.json", report.to_dict())
    return report


def mape_over(summary: dict, max_error: float | None) -> float | None:
    """The steady step time's MAPE (%) when it exceeds `max_error`, else None."""
    step = summary.get("step_time_s")
    if max_error is not None and step and step["mape_pct"] > max_error:
        return step["mape_pct"]
    return None
