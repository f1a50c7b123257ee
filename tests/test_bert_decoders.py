"""The BERT family's causal-LM classes (BertLMHeadModel and kin, profiles/hf_bert.py): each type
that loads is counted exactly as transformers counts it on the meta device (GIT: its text
decoder, the image tower left out as for every multimodal config), simulates, and the types or
switches tierlab does not model are refused in one line."""

import pytest

from tests._hfdefaults import default_config, written as write
from tests._cli import assert_user_error, run, simulated_step_s
from tierlab.errors import ConfigError
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.load import load_model
from tierlab.sim import flops

transformers = pytest.importorskip("transformers")

LOADED = {"bert": {}, "bert-generation": {}, "camembert": {}, "data2vec-text": {}, "ernie": {},
          "megatron-bert": {}, "roberta": {}, "roberta-prelayernorm": {}, "roc_bert": {},
          "roformer": {}, "xlm-roberta": {}, "xlm-roberta-xl": {}, "git": {},
          "big_bird": {"attention_type": "original_full"}, "electra": {}, "rembert": {},
          "xlm": {}}
"""model_type -> keys set over transformers' default config."""

REFUSED = {"reformer": "is_decoder"}
"""model_type (default config) -> what its one-line refusal names (BigBird's block-sparse
attention: tests/test_bigbird_prophetnet.py; Xmod's adapters: tests/test_xmod.py; XLNet, the
example here before, loads: tests/test_xlnet.py; Reformer's causal LM needs is_decoder true)."""

PRE_LN = {"roberta-prelayernorm", "xlm-roberta-xl", "megatron-bert"}

CAUSAL = {"xlm": {"causal": True}}
"""The key that makes a type's mask causal where it is not is_decoder."""


def tower_params(data: dict) -> int:
    """GIT's image encoder (modeling_git.py line 722), which tierlab leaves out like every
    multimodal config's tower: transformers' count of it on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if data["model_type"] != "git":
        return 0
    cfg = {k: v for k, v in data.items() if k != "model_type"}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("git", **cfg))
    return sum(p.numel() for p in model.git.image_encoder.parameters())


@pytest.mark.parametrize("model_type", sorted(LOADED))
def test_counts_equal_transformers(tmp_path, model_type):
    data = default_config(model_type, **LOADED[model_type])
    model = load_model(str(write(tmp_path, data)))
    assert model.n_params == meta_param_count(data) - tower_params(data)
    assert model.norm == "layernorm" and model.bias and model.block_norms == 2
    assert model.final_norm == (model_type in PRE_LN)


def test_bert_fields_read_off_the_modules(tmp_path):
    """bert-base sizes: token types 2 x 768 beside the table, positions 512, the head's
    transform (768 x 768 + bias + LayerNorm), the tied decoder with its bias, no final norm."""
    model = load_model(str(write(tmp_path, default_config("bert", is_decoder=True))))
    assert (model.hidden, model.ffn, model.n_heads, model.n_layers) == (768, 3072, 12, 12)
    assert model.embed_tensors == (("token_type_embeddings.weight", 2 * 768),)
    assert model.learned_pos_emb and model.pos_emb_rows == 512 and model.embed_norm
    assert model.head_transform and model.head_bias and model.tie_embeddings
    assert not model.gated_mlp and not model.final_norm
    assert model.not_modelled == ()        # is_decoder true: the causal decoder, nothing to say


def test_is_decoder_false_is_named(tmp_path):
    model = load_model(str(write(tmp_path, default_config("roberta"))))
    assert any("is_decoder is false" in n for n in model.not_modelled)


def test_head_transform_is_timed(tmp_path):
    """2 h h per token more in the head than the LM head's 2 h V."""
    model = load_model(str(write(tmp_path, default_config("bert", is_decoder=True))), seq_len=8)
    assert flops.logits_forward(model, 1) == 2.0 * 8 * 768 * (30522 + 768)


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_unmodelled_types_are_refused_in_one_line(tmp_path, model_type):
    data = default_config(model_type)
    with pytest.raises(ConfigError) as e:
        load_model(str(write(tmp_path, data)))
    text = str(e.value)
    assert "\n" not in text and repr(model_type) in text and REFUSED[model_type] in text


def test_cross_attention_is_refused(tmp_path):
    data = default_config("bert", is_decoder=True, add_cross_attention=True)
    with pytest.raises(ConfigError, match="cross-attention to an encoder"):
        load_model(str(write(tmp_path, data)))


@pytest.mark.parametrize("model_type", sorted(LOADED))
def test_simulate_runs(tmp_path, model_type):
    """`tierlab simulate` of each loaded type, two blocks deep, as a user runs it."""
    data = dict(default_config(model_type, **CAUSAL.get(model_type, {"is_decoder": True}),
                               **LOADED[model_type]), num_hidden_layers=2)
    assert simulated_step_s(write(tmp_path, data), "dgx-a100", 512) > 0


def test_bad_value_is_one_line_and_exit_2(tmp_path):
    """hidden_size not a multiple of the heads: transformers' BertSelfAttention refuses it
    (modeling_bert.py lines 143-147); tierlab says so in one line, exit 2."""
    path = write(tmp_path, default_config("bert", is_decoder=True, hidden_size=100))
    assert_user_error(run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu"),
                      path.name, "'bert'")


def test_factorized_embeddings_are_read(tmp_path):
    """ELECTRA: a 128-wide table, projected to 256-wide blocks, the head's transform back to 128
    and the tied decoder; RemBERT: a 256-wide table for 1,152-wide blocks, an untied decoder
    reading 1,664 (output_embedding_size)."""
    electra = load_model(str(write(tmp_path, default_config("electra"))))
    assert (electra.embed_width, electra.hidden, electra.head_width) == (128, 256, 128)
    assert electra.tie_embeddings and electra.head_transform
    rembert = load_model(str(write(tmp_path, default_config("rembert"))))
    assert (rembert.embed_width, rembert.hidden, rembert.head_width) == (256, 1152, 1664)
    assert not rembert.tie_embeddings
    s = 8
    rembert = load_model(str(write(tmp_path, default_config("rembert"))), seq_len=s)
    assert flops.logits_forward(rembert, 1) == 2.0 * s * (
        1664 * 250300 + 1152 * 1664 + 256 * 1152)


def test_xlm_parallel_lists_are_read(tmp_path):
    """XLM keeps its blocks as four lists (attentions, ffns, layer_norm1, layer_norm2):
    read as blocks; with n_langs > 1 and use_lang_emb its language table is counted."""
    data = default_config("xlm", causal=True, n_langs=3, use_lang_emb=True)
    model = load_model(str(write(tmp_path, data)))
    assert model.n_params == meta_param_count(data)
    assert (model.n_layers, model.hidden, model.ffn, model.n_heads) == (12, 2048, 8192, 16)
    assert model.embed_tensors == (("lang_embeddings.weight", 3 * 2048),)
    assert model.embed_norm and not model.final_norm and model.not_modelled == ()
