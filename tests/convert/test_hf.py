"""Language bodies equal Hugging Face transformers: BERT, RoBERTa, ELECTRA, GPT-2 and OpenAI GPT, converted by
`vspec.convert.hf`, at full preset size on padded batches of random lengths; every preset is its HF config; a
padded batch equals each sequence run alone; image-only kinds are refused by rule. The HF models are built here
from configs with random weights (nothing is downloaded)."""

import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch

import vspec
from tests.helpers.checks import perturbed
from vspec.convert import ConversionError, from_hf, spec_from_hf
from vspec.spec import MHSA, MeanShiftAttention, Model, Projections, SpecError

transformers = pytest.importorskip("transformers")  # the `text` extra, which `make test` installs
ROOT = Path(__file__).resolve().parents[2]

# preset -> (HF task class, config class, the config's arguments): the released models' configs, 2 labels
PRESETS = {
    "bert_base": ("BertForSequenceClassification", "BertConfig", {}),
    "bert_large": ("BertForSequenceClassification", "BertConfig",
                   dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)),
    "spanbert_base": ("BertForSequenceClassification", "BertConfig", dict(vocab_size=28996)),
    "roberta_base": ("RobertaForSequenceClassification", "RobertaConfig",
                     dict(max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5)),
    "roberta_large": ("RobertaForSequenceClassification", "RobertaConfig",
                      dict(max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5, hidden_size=1024,
                           num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)),
    "electra_small": ("ElectraForSequenceClassification", "ElectraConfig", {}),
    "gpt": ("OpenAIGPTForSequenceClassification", "OpenAIGPTConfig", {}),
    "gpt2": ("GPT2ForSequenceClassification", "GPT2Config", {}),
    "gpt2_medium": ("GPT2ForSequenceClassification", "GPT2Config", dict(n_embd=1024, n_layer=24, n_head=16)),
}
FAMILIES = ["bert_base", "roberta_base", "electra_small", "gpt2", "gpt"]  # one of each, at full size


def hf_config(name: str, **changes):
    task, config, kwargs = PRESETS[name]
    pad = {"GPT2Config": 0, "OpenAIGPTConfig": 0}.get(config)  # GPT's classifier finds the last non-pad token
    extra = {} if pad is None else {"pad_token_id": pad}
    return getattr(transformers, task), getattr(transformers, config)(**{**kwargs, **extra, **changes},
                                                                      num_labels=2)


def padded_batch(vocab: int, pad: int, lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded token ids (B, max length) of the given lengths, and HF's attention_mask."""
    g = torch.Generator().manual_seed(seed)
    n = max(lengths)
    mask = (torch.arange(n)[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(3, vocab, (len(lengths), n), generator=g)
    return torch.where(mask.bool(), ids, torch.full_like(ids, pad)), mask


def pad_id(config) -> int:
    return config.pad_token_id if config.pad_token_id is not None else 0


def preset_as_converted(name: str, config) -> vspec.Model:
    """The preset, its GPT head with Hugging Face's rule for `config` (from_hf sets pad_id = pad_token_id)."""
    spec = vspec.load_spec(ROOT / "specs" / f"{name}.py")
    if spec.head.kind == "last_token":
        spec = attrs.evolve(spec, head=attrs.evolve(spec.head, pad_id=config.pad_token_id))
    return spec


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_equals_hugging_face_at_full_size(name):
    """Random-init HF model, every weight perturbed, converted: the same last hidden states (at real tokens) and
    the same logits within 1e-5, on a padded batch of random lengths (causal for the GPTs); same parameters."""
    task, config = hf_config(name)
    torch.manual_seed(0)
    hf = perturbed(task(config))
    ours = from_hf(hf).eval()
    assert ours.spec == preset_as_converted(name, config)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters())
    lengths = torch.randint(2, 48, (4,), generator=torch.Generator().manual_seed(1)).tolist()
    ids, mask = padded_batch(config.vocab_size, pad_id(config), lengths)
    with torch.no_grad():
        hidden = hf.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
        logits = hf(input_ids=ids, attention_mask=mask).logits
        ours_hidden = ours.forward_features(input_ids=ids, attention_mask=mask)
        ours_logits = ours(input_ids=ids, attention_mask=mask)
    real = mask.bool()
    assert (ours_hidden[real] - hidden[real]).abs().max() < 1e-5
    assert (ours_logits - logits).abs().max() < 1e-5
    assert logits.abs().max() > 1e-2  # the check can fail: logits that are not ~0


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_its_hugging_face_config_with_equal_parameters(name):
    """spec_from_hf of the released model's config is the preset; HF's model and vspec's, both on the meta device,
    have the same number of parameters (the README's table)."""
    task, config = hf_config(name)
    spec = vspec.load_spec(ROOT / "specs" / f"{name}.py")
    assert spec_from_hf(config, classifier=True) == preset_as_converted(name, config)
    with torch.device("meta"):
        hf_params = sum(p.numel() for p in task(config).parameters())
    assert sum(p.numel() for p in vspec.build(spec, "meta").parameters()) == hf_params


SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=100)
GPT_SMALL = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=100)
BASES = {  # base models (no classifier) at a small size
    "BertModel": ("BertConfig", SMALL), "RobertaModel": ("RobertaConfig", {**SMALL, "max_position_embeddings": 66}),
    "ElectraModel": ("ElectraConfig", {**SMALL, "embedding_size": 16}), "GPT2Model": ("GPT2Config", GPT_SMALL),
    "OpenAIGPTModel": ("OpenAIGPTConfig", GPT_SMALL),
}


@pytest.mark.parametrize("task", sorted(BASES))
def test_base_models_hidden_states_pooler_and_intermediates(task):
    """The base models: last hidden states, BERT's and RoBERTa's pooler output (the head with 0 classes), and
    forward_intermediates' per-layer hidden states (HF's output_hidden_states, whose last one GPT-2 gives after
    its final norm, as forward_intermediates' final features)."""
    config_name, kwargs = BASES[task]
    config = getattr(transformers, config_name)(**kwargs, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    hf = perturbed(getattr(transformers, task)(config))
    ours = from_hf(hf).eval()
    ids, mask = padded_batch(100, pad_id(config), [9, 5, 12])
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        final, layers = ours.forward_intermediates(ids, attention_mask=mask)
        pooled = ours(ids, mask)
    real = mask.bool()
    assert len(layers) == len(out.hidden_states) - 1
    for got, want in zip([*layers[:-1], final], out.hidden_states[1:]):
        assert (got[real] - want[real]).abs().max() < 1e-5
    assert (final[real] - out.last_hidden_state[real]).abs().max() < 1e-5
    if getattr(out, "pooler_output", None) is not None:
        assert (pooled - out.pooler_output).abs().max() < 1e-5
    else:
        assert getattr(ours.spec.head, "pooler", None) is None and ours.spec.num_classes == 0


@pytest.mark.parametrize("task", sorted(BASES))
def test_a_saved_folder_loads_without_download(task, tmp_path):
    """from_hf(folder) reads config.json + model.safetensors as save_pretrained wrote them."""
    config_name, kwargs = BASES[task]
    config = getattr(transformers, config_name)(**kwargs, bos_token_id=None, eos_token_id=None)
    hf = perturbed(getattr(transformers, task)(config))
    hf.save_pretrained(tmp_path)
    assert any(tmp_path.glob("*.safetensors"))
    ours = from_hf(tmp_path)  # in eval mode, as HF's from_pretrained gives a model
    assert not any(m.training for m in ours.modules()) and not from_hf(hf.train()).training
    hf.eval()
    ids, mask = padded_batch(100, pad_id(config), [7, 4])
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours.forward_features(ids, mask)
    assert (got - want)[mask.bool()].abs().max() < 1e-5


def test_conversion_is_strict():
    config = transformers.BertConfig(**SMALL)
    state = transformers.BertModel(config).state_dict()
    with pytest.raises(ConversionError, match="unused checkpoint keys: encoder.layer.0.extra"):
        from_hf({**state, "encoder.layer.0.extra": torch.zeros(1)}, spec=spec_from_hf(config))
    del state["encoder.layer.1.output.dense.weight"]
    with pytest.raises(ConversionError, match=r"spec keys not in the checkpoint: stages\.0\.blocks\.1\.ffn\.fc2"):
        from_hf(state, spec=spec_from_hf(config))
    with pytest.raises(ConversionError, match="without its config"):
        from_hf(state)
    with pytest.raises(ConversionError, match="model_type 't5'"):
        spec_from_hf({"model_type": "t5"})
    with pytest.raises(ConversionError, match="position_embedding_type"):
        spec_from_hf(transformers.BertConfig(**SMALL, position_embedding_type="relative_key"))


def small_text(**changes) -> Model:
    spec = spec_from_hf(transformers.BertConfig(**SMALL), classifier=True)
    return attrs.evolve(spec, **changes)


@pytest.mark.parametrize("attention", [
    MHSA(heads=4), MeanShiftAttention(heads=4), MHSA(heads=2, head_dim=8, qkv_bias=False),
    MeanShiftAttention(heads=4, form="eq14", projections=Projections(roles="QKKPW", groups=2)),
    MHSA(heads=4, projections=Projections(roles="QKKQ", groups=4, grouping="block"))],
    ids=["mhsa", "mean_shift", "narrow", "mean_shift_tied_grouped", "mhsa_tied_grouped"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_padded_batch_equals_each_sequence_alone(attention, causal, seed):
    """Random lengths, right padding: the outputs at real tokens and the logits equal each sequence run unpadded
    (every attention masks the padding; the head reads real tokens only)."""
    spec = small_text(block=attrs.evolve(small_text().block, attention=attention), causal=causal,
                      head=vspec.spec.LastTokenHead() if causal else vspec.spec.GAPHead())
    torch.manual_seed(seed)
    model = vspec.build(spec).eval()
    lengths = torch.randint(1, 20, (4,), generator=torch.Generator().manual_seed(seed)).tolist()
    ids, mask = padded_batch(100, 0, lengths, seed)
    with torch.no_grad():
        hidden, logits = model.forward_features(ids, mask), model(ids, mask)
        for i, n in enumerate(lengths):
            alone = ids[i:i + 1, :n]
            assert (model.forward_features(alone)[0] - hidden[i, :n]).abs().max() < 1e-5
            assert (model(alone)[0] - logits[i]).abs().max() < 1e-5


def test_image_only_kinds_refuse_a_text_body_naming_the_field():
    block = small_text().block
    for changes, path in [
        (dict(block=attrs.evolve(block, attention=vspec.spec.WindowMHSA(heads=4, window=4))), "block.attention"),
        (dict(block=attrs.evolve(block, ffn=vspec.spec.DAFF())), "block.ffn"),
        (dict(block=attrs.evolve(block, attention=vspec.spec.RefinerAttention(
            heads=4, refine=vspec.spec.Refine(constraint="spatial")))), "block.attention.refine.constraint"),
        (dict(block=vspec.spec.HeadTokenBlock(attention=block.attention, ffn=block.ffn)), "block.head_tokens"),
        (dict(head=vspec.spec.ClassTokenHead()), "head"),
        (dict(class_token=True), "class_token"),
        (dict(pos_embed="learned"), "pos_embed"),
    ]:
        with pytest.raises(SpecError) as info:
            small_text(**changes)
        assert info.value.path == path, (changes, str(info.value))
    with pytest.raises(SpecError, match="patch_merging needs an image's token grid") as info:
        Model(embedder=small_text().embedder, stages=[vspec.spec.Stage(depth=1, dim=32, block=block),
                                                      vspec.spec.Stage(depth=1, dim=64, block=block,
                                                                       entry=vspec.spec.PatchMerging())],
              class_token=False, pos_embed="none", head=vspec.spec.GAPHead())
    assert info.value.path == "stages.1.entry"


def test_inputs_are_checked_in_one_line():
    model = vspec.build(small_text()).eval()
    ids, mask = padded_batch(100, 0, [5, 3])
    with pytest.raises(ValueError, match="integer input_ids"):
        model(torch.randn(2, 5))
    with pytest.raises(ValueError, match="attention_mask of shape"):
        model(ids, mask[:, :3])
    with pytest.raises(ValueError, match="position table holds 512"):
        model(torch.zeros(1, 513, dtype=torch.long))
    with pytest.raises(TypeError, match="give the input once"):
        model(ids, input_ids=ids)
    image = vspec.build(vspec.load_spec(ROOT / "specs" / "deit_tiny.py"), "meta")
    with pytest.raises(ValueError, match="an image model has no padding"):
        image(torch.zeros(1, 3, 224, 224, device="meta"), attention_mask=torch.ones(1, 197))


def test_token_types_and_roberta_positions():
    """Segment ids change the output (BERT); RoBERTa's positions count real tokens from padding_id + 1, so a
    left-padded sequence equals itself unpadded at its real tokens."""
    model = vspec.build(small_text()).eval()
    ids, _ = padded_batch(100, 0, [8])
    with torch.no_grad():
        assert (model.forward_features(ids, token_type_ids=torch.ones_like(ids)) - model.forward_features(ids)
                ).abs().max() > 1e-3
    config = transformers.RobertaConfig(**{**SMALL, "max_position_embeddings": 66})
    roberta = vspec.build(spec_from_hf(config)).eval()
    ids = torch.randint(3, 100, (1, 6))
    left = torch.cat((torch.ones(1, 3, dtype=torch.long), ids), 1)  # padding id 1
    mask = (left != 1).long()
    with torch.no_grad():
        assert (roberta.forward_features(left, mask)[0, 3:] - roberta.forward_features(ids)[0]).abs().max() < 1e-5


def test_importing_vspec_never_imports_transformers():
    code = ("import sys, vspec, vspec.compiler, vspec.convert, vspec.convert.hf, vspec.profiler; "
            "vspec.build(vspec.load_spec('specs/bert_base.py'), 'meta'); "
            "assert 'transformers' not in sys.modules, 'transformers imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_commands_take_text_specs(capsys):
    from vspec.cli import main

    main(["profile", "specs/electra_small.py", "--seq-len", "64"])
    out = capsys.readouterr().out
    assert "at 64 tokens" in out and "stage 0: 64 tokens x 256" in out
    main(["build", "specs/electra_small.py", "--batch-size", "2"])
    assert "forward (2, 128) -> (2, 2): finite=True" in capsys.readouterr().out
    main(["show", "specs/gpt2.py"])
    assert "last_token" in capsys.readouterr().out
    assert main(["profile", "specs/electra_small.py", "--input-size", "64"]) == 2
    assert "give its length with --seq-len" in capsys.readouterr().err
