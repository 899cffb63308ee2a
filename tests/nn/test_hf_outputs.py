"""A vspec model called as a Hugging Face model: `labels=` gives the loss HF's `...ForSequenceClassification`
computes on the same weights (its `problem_type` rule), `output_hidden_states=True` HF's hidden states, the output
reads as transformers' `ModelOutput` does (what its Trainer indexes), `position_ids` reach the positions; the plain
call is one logits tensor. The HF models are built here from small configs with random weights."""

import copy
import inspect
import pickle
from pathlib import Path

import pytest
import torch

import vspec
from tests.helpers.checks import perturbed
from vspec.convert import from_hf
from vspec.nn.outputs import ModelOutput

transformers = pytest.importorskip("transformers")  # the `text` extra, which `make test` installs
ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=100)
GPT_SMALL = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=100, bos_token_id=None, eos_token_id=None)
FAMILIES = {  # task model, config, its arguments (GPT's classifiers find the last token that is not pad_token_id)
    "bert": ("BertForSequenceClassification", "BertConfig", SMALL),
    "roberta": ("RobertaForSequenceClassification", "RobertaConfig", {**SMALL, "max_position_embeddings": 66}),
    "electra": ("ElectraForSequenceClassification", "ElectraConfig", {**SMALL, "embedding_size": 16}),
    "gpt2": ("GPT2ForSequenceClassification", "GPT2Config", {**GPT_SMALL, "pad_token_id": 0}),
    "gpt": ("OpenAIGPTForSequenceClassification", "OpenAIGPTConfig", {**GPT_SMALL, "pad_token_id": 0}),
}


def hf_pair(family: str, num_labels: int = 3, **changes):
    """HF's task model (random weights, every one perturbed, eval mode) and vspec's conversion of it (eval)."""
    task, config, kwargs = FAMILIES[family]
    config = getattr(transformers, config)(**{**kwargs, **changes}, num_labels=num_labels)
    torch.manual_seed(0)
    hf = perturbed(getattr(transformers, task)(config))
    return hf, from_hf(hf).eval()


def right_padded(lengths: list[int], pad: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(3, 100, mask.shape, generator=g)
    return torch.where(mask.bool(), ids, torch.full_like(ids, pad)), mask


def pad_of(family: str) -> int:
    return 1 if family == "roberta" else 0


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_hidden_states_equal_hugging_face(family):
    """output_hidden_states=True: depth + 1 tensors, the embedding output first, each equal to HF's at the real
    tokens of a right-padded batch (GPT-2's last one after its final LayerNorm, as HF gives it); the logits too."""
    hf, ours = hf_pair(family)
    ids, mask = right_padded([9, 4, 6], pad_of(family))
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        got = ours(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert list(got) == ["logits", "hidden_states"]
    assert len(got.hidden_states) == len(want.hidden_states) == ours.spec.depth + 1
    real = mask.bool()
    for mine, theirs in zip(got.hidden_states, want.hidden_states, strict=True):
        assert (mine[real] - theirs[real]).abs().max() < 1e-5
    assert (got.logits - want.logits).abs().max() < 1e-5
    assert want.logits.abs().max() > 1e-2


@pytest.mark.parametrize("family", ["bert", "gpt2"])
@pytest.mark.parametrize("problem", ["single_label", "regression", "multi_label"])
def test_loss_equals_hugging_face_problem_type(family, problem):
    """labels=: HF's problem_type rule on the same weights: integer labels -> cross-entropy, one output -> MSE,
    float labels of the logits' shape -> BCE with logits; loss first, then logits; return_dict=False the tuple."""
    num_labels = 1 if problem == "regression" else 3
    hf, ours = hf_pair(family, num_labels)
    ids, mask = right_padded([9, 4, 6, 7], pad_of(family), seed=1)
    g = torch.Generator().manual_seed(2)
    labels = {"single_label": torch.tensor([0, 2, 1, 2]), "regression": torch.randn(4, generator=g),
              "multi_label": torch.randint(0, 2, (4, 3), generator=g).float()}[problem]
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, labels=labels)
        got = ours(input_ids=ids, attention_mask=mask, labels=labels)
        plain = ours(input_ids=ids, attention_mask=mask, labels=labels, return_dict=False)
    assert hf.config.problem_type == (problem if problem == "regression" else f"{problem}_classification")
    assert list(got) == ["loss", "logits"] and got.loss.ndim == 0
    assert abs(got.loss - want.loss) < 1e-5 and want.loss > 1e-2
    assert (got.logits - want.logits).abs().max() < 1e-5
    assert isinstance(plain, tuple) and len(plain) == 2 and torch.equal(plain[0], got.loss)


def test_the_output_reads_as_transformers_model_output():
    """The same values in transformers' SequenceClassifierOutput and in vspec's ModelOutput read alike: keys
    (None fields absent), attributes, integer and slice indexing, to_tuple, a rebuild from its items (accelerate's
    `type(out)({...})`), and they pickle and copy."""
    loss, logits, hidden = torch.tensor(0.5), torch.randn(2, 3), (torch.randn(2, 4, 8),) * 3
    for args in [dict(loss=loss, logits=logits), dict(logits=logits, hidden_states=hidden),
                 dict(loss=loss, logits=logits, hidden_states=hidden)]:
        want, got = transformers.modeling_outputs.SequenceClassifierOutput(**args), ModelOutput(**args)
        assert list(got.keys()) == list(want.keys())
        for key in ("loss", "logits", "hidden_states"):
            assert getattr(got, key) is getattr(want, key)
        assert got[0] is want[0] and got[1:] == want[1:] and got.to_tuple() == want.to_tuple()
        assert isinstance(got, dict) and got["logits"] is logits
        for rebuilt in (type(got)(dict(got.items())), type(got)(iter(got.items())), copy.copy(got)):
            assert type(rebuilt) is ModelOutput and list(rebuilt.items()) == list(got.items())
        again = pickle.loads(pickle.dumps(got))
        assert list(again) == list(got) and torch.equal(again.logits, logits)
    with pytest.raises(KeyError, match="not 'scores'"):
        ModelOutput({"scores": logits})
    with pytest.raises(AttributeError, match="no attribute 'attentions'"):
        ModelOutput(logits=logits).attentions


def test_the_plain_call_is_unchanged_and_the_signature_names_hugging_face_inputs():
    """Without labels / return_dict / output_hidden_states the model returns its logits tensor; the forward's
    signature names what HF's Trainer keeps of a dataset's columns."""
    hf, ours = hf_pair("bert")
    ids, mask = right_padded([5, 3], 0)
    with torch.no_grad():
        logits = ours(ids, mask)
        assert isinstance(logits, torch.Tensor) and torch.equal(logits, ours(input_ids=ids, attention_mask=mask,
                                                                                output_hidden_states=False))
        assert torch.equal(ours(ids, mask, return_dict=True).logits, logits)
        plain = ours(ids, mask, return_dict=False)
    assert type(plain) is tuple and len(plain) == 1 and torch.equal(plain[0], logits)
    names = inspect.signature(ours.forward).parameters
    assert {"input_ids", "attention_mask", "token_type_ids", "position_ids", "labels"} <= set(names)


def test_losses_refuse_labels_they_cannot_read():
    _, ours = hf_pair("bert")
    ids, mask = right_padded([5, 3], 0)
    with pytest.raises(ValueError, match=r"float labels of shape \(2,\)"):
        ours(ids, mask, labels=torch.zeros(2))
    with pytest.raises(ValueError, match="labels of dtype torch.bool"):
        ours(ids, mask, labels=torch.zeros(2, dtype=torch.bool))
    ours.reset_classifier(0)
    with pytest.raises(ValueError, match="no classifier"):
        ours(ids, mask, labels=torch.zeros(2, dtype=torch.long))


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_position_ids_reach_the_positions_as_in_hugging_face(family):
    """Given position_ids, (B, L) or (1, L), HF's and vspec's hidden states agree at every token (positions that
    step by 1: HF reads any other step as the start of a packed sequence and masks across it, vspec does not)."""
    hf, ours = hf_pair(family)
    ids = torch.randint(3, 100, (2, 7), generator=torch.Generator().manual_seed(3))
    for positions in (torch.arange(5, 12)[None], torch.stack([torch.arange(20, 27), torch.arange(3, 10)])):
        with torch.no_grad():
            want = hf(input_ids=ids, position_ids=positions, output_hidden_states=True).hidden_states
            got = ours(input_ids=ids, position_ids=positions, output_hidden_states=True).hidden_states
            default = ours(input_ids=ids, output_hidden_states=True).hidden_states
        assert (got[-1] - want[-1]).abs().max() < 1e-5
        assert (got[-1] - default[-1]).abs().max() > 1e-3  # the positions were used


def test_position_ids_are_checked_in_one_line():
    _, ours = hf_pair("bert")
    ids = torch.zeros(2, 5, dtype=torch.long)
    for positions, match in [(torch.zeros(2, 4, dtype=torch.long), r"position_ids of shape \(2, 4\)"),
                             (torch.zeros(3, 5, dtype=torch.long), r"position_ids of shape \(3, 5\)"),
                             (torch.zeros(2, 5), "dtype torch.float32"),
                             (torch.full((1, 5), 512), r"each must be in \[0, 512\)"),
                             (torch.full((1, 5), -1), r"each must be in \[0, 512\)")]:
        with pytest.raises(ValueError, match=match):
            ours(ids, position_ids=positions)
    image = vspec.build(vspec.load_spec(ROOT / "specs" / "deit_tiny.py"), "meta")
    with pytest.raises(ValueError, match="position_ids: an image model takes none"):
        image(torch.zeros(1, 3, 224, 224, device="meta"), position_ids=torch.zeros(1, 197, dtype=torch.long))


def test_an_image_model_gives_hidden_states_and_a_loss():
    """The same call on an image model: the embedding output (class token and positions added) and each block's
    output, the last after the final norm (forward_features); cross-entropy against integer labels."""
    spec = vspec.spec.override(vspec.load_spec(ROOT / "specs" / "deit_tiny.py"),
                               {"depth": 2, "dim": 32, "block.attention.heads": 2, "img_size": 32})
    torch.manual_seed(0)
    model = vspec.build(spec).eval()
    x, labels = torch.randn(2, 3, 32, 32), torch.tensor([3, 7])
    with torch.no_grad():
        out = model(x, labels=labels, output_hidden_states=True)
        blocks = model.forward_intermediates(x, output_fmt="NLC", intermediates_only=True)
        final, logits = model.forward_features(x), model(x)
    assert len(out.hidden_states) == 3 and torch.equal(out.hidden_states[0], model.forward_tokens(x).x)
    assert torch.equal(out.hidden_states[1], blocks[0]) and torch.equal(out.hidden_states[2], final)
    assert torch.equal(out.logits, logits)
    assert abs(out.loss - torch.nn.functional.cross_entropy(logits, labels)) < 1e-6


@pytest.mark.parametrize("family", ["bert", "electra", "gpt2"])
def test_device_dtype_and_num_parameters_as_hugging_face(family):
    """model.device, model.dtype and num_parameters(only_trainable, exclude_embeddings) say what HF's model of the
    same weights says, a block frozen in both; device and dtype follow .to()."""
    hf, ours = hf_pair(family)
    first = hf.base_model.encoder.layer[0] if family != "gpt2" else hf.base_model.h[0]
    first.requires_grad_(False)
    ours.stages[0].blocks[0].requires_grad_(False)
    for only_trainable in (False, True):
        for exclude_embeddings in (False, True):
            assert ours.num_parameters(only_trainable, exclude_embeddings) == \
                hf.num_parameters(only_trainable=only_trainable, exclude_embeddings=exclude_embeddings)
    assert ours.num_parameters(exclude_embeddings=True) < ours.num_parameters(only_trainable=True) < \
        ours.num_parameters()
    assert (ours.device, ours.dtype) == (hf.device, hf.dtype) == (torch.device("cpu"), torch.float32)
    ours.to(torch.float64)
    assert ours.dtype == torch.float64 and ours.to("meta").device == torch.device("meta")
