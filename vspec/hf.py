"""vspec models as Hugging Face transformers models, the way transformers documents custom models: `VspecConfig` (a
`PretrainedConfig`, model_type "vspec", holding the spec) and a `PreTrainedModel` per task, `VspecModel` (the body:
hidden states and the head's pooled features), `VspecForSequenceClassification` (a text spec) and
`VspecForImageClassification` (an image spec). `register_hf()` registers them with `AutoConfig` and the `Auto*`
classes, so that

    vspec.register_hf()
    model = VspecForSequenceClassification(VspecConfig(spec="bert_base_sot_rte", num_labels=3))
    model.save_pretrained("out")                    # config.json (model_type "vspec", the spec) + model.safetensors
    AutoModelForSequenceClassification.from_pretrained("out")    # the same model, in eval mode
    pipeline("text-classification", model="out", tokenizer=...)  # and Trainer, whose save_model writes config.json

The classes count is `config.num_labels` (HF's: `AutoConfig.from_pretrained(folder, num_labels=3)` changes the
classifier), written into the spec that config.json holds. The vspec model (`vspec.nn.model.Transformer`) is the
`model` attribute, its weights under `model.`; its forward takes HF's names (input_ids, attention_mask,
token_type_ids, position_ids, labels, return_dict, output_hidden_states), and the loss is the vspec model's, by HF's
`problem_type` rule (vspec.nn.outputs). `vspec.from_pretrained` reads a folder written here too
(vspec.weights.folder), and HF reads vspec's own folders (`vspec.save_pretrained`: keys without the `model.`
prefix, which HF adds).

Loading: transformers 5 builds a model on the meta device and initialises what the checkpoint does not hold with
`_init_weights`; a vspec model is built by the compiler, whose modules initialise themselves (and compute their
non-persistent buffers: SoT's indices, sin-cos tables), so these classes are built on the CPU (or the dtype's
device) as transformers 4 built every model, and `_init_weights` changes nothing: loaded weights are loaded, the
others keep the vspec build's values. Importing this module imports transformers (the `text` extra); importing
vspec does not."""

import json
from itertools import chain
from pathlib import Path
from typing import Any

import torch

from .compiler import build
from .extras import needs
from .spec import Model, SpecError, from_dict, load_spec, override, to_dict
from .weights.folder import HF_MODEL_TYPE, HF_PREFIX

__all__ = [
    "VspecConfig", "VspecForImageClassification", "VspecForSequenceClassification", "VspecModel",
    "VspecPreTrainedModel", "register_hf",
]
with needs("vspec.register_hf"):
    from transformers import (  # extra: vspec[text]
        AutoConfig,
        AutoModel,
        AutoModelForImageClassification,
        AutoModelForSequenceClassification,
        PretrainedConfig,
        PreTrainedModel,
    )
    from transformers.modeling_outputs import (  # extra: vspec[text]
        BaseModelOutputWithPooling,
        ImageClassifierOutput,
        SequenceClassifierOutput,
    )

_MODEL_TYPE = HF_MODEL_TYPE
_PREFIX = HF_PREFIX.rstrip(".")  # the attribute holding the vspec model: its weights' prefix in transformers' folders
# a vspec model folder's own config.json fields (vspec.weights.folder), which a config read from one leaves out:
# its checksum would not cover what transformers writes back
_FOLDER_FIELDS = ("format", "vspec_version", "architecture", "num_classes", "num_features", "sha256", "pretrained_cfg")


def _spec(spec: Any) -> Model:
    """A Model from a Model, its dict (`vspec.to_dict`'s, as config.json holds it), a preset name or a spec file."""
    if isinstance(spec, Model):
        return spec
    if isinstance(spec, dict):
        return from_dict(json.loads(json.dumps(spec)))  # a copy: from_dict upgrades an earlier format in place
    if isinstance(spec, str | Path):
        return load_spec(spec)
    raise SpecError("spec", f"a vspec Model, its dict, a preset name or a spec file, not {type(spec).__name__}")


class VspecConfig(PretrainedConfig):
    """transformers' config of a vspec model: `spec`, the spec as `vspec.to_dict` gives it (a Model, a preset name
    or a spec file is taken too), and HF's fields; `num_labels` / `id2label` start from the spec's num_classes and
    say the classes from then on (the spec saved with them)."""

    model_type = _MODEL_TYPE
    spec: Any = None

    def __post_init__(self, **kwargs):
        for name in _FOLDER_FIELDS:
            kwargs.pop(name, None)
        if self.spec is not None:
            spec = _spec(self.spec)
            self.spec = json.loads(json.dumps(to_dict(spec)))
            if self.id2label is None and kwargs.get("num_labels") is None:
                kwargs["num_labels"] = spec.num_classes
        super().__post_init__(**kwargs)

    def vspec_spec(self, num_classes: int | None = None) -> Model:
        """The spec with the config's classes (`num_labels`), or `num_classes`."""
        if self.spec is None:
            raise SpecError("spec", "the config holds no spec: VspecConfig(spec=...) takes a vspec Model, its dict, a "
                                    "preset name or a spec file")
        spec = _spec(self.spec)
        classes = self.num_labels if num_classes is None else num_classes
        return spec if spec.num_classes == classes else override(spec, {"num_classes": classes})

    def to_dict(self) -> dict[str, Any]:
        """transformers' dict of the config, the spec's num_classes set to `num_labels`."""
        out = super().to_dict()
        if out.get("spec") is not None and self.num_labels is not None:
            out["spec"] = {**out["spec"], "num_classes": self.num_labels}
        return out


class VspecPreTrainedModel(PreTrainedModel):
    """The vspec model (`.model`, a `vspec.nn.model.Transformer` built from `config.vspec_spec(num_classes)`) as a
    `PreTrainedModel`; built where its weights go (not on the meta device) and never re-initialised by transformers
    (the module's docstring says why)."""

    config_class = VspecConfig
    base_model_prefix = _PREFIX
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    text: bool = True  # the task's inputs: token ids (None: either)

    def __init__(self, config: VspecConfig, num_classes: int | None = None):
        super().__init__(config)
        spec = config.vspec_spec(num_classes)
        if self.text is not None and bool(spec.embedder.text) != self.text:
            raise SpecError("spec", f"{type(self).__name__} takes a {'text' if self.text else 'image'} spec; this one "
                                    f"reads {'token ids' if spec.embedder.text else 'images'}")
        setattr(self, _PREFIX, build(spec))
        if not spec.embedder.text:
            self.main_input_name = "pixel_values"
        self.post_init()

    @classmethod
    def get_init_context(cls, *args, **kwargs) -> list:
        """transformers' contexts for building the model, less the meta device: the vspec build initialises it."""
        return [c for c in super().get_init_context(*args, **kwargs)  # the device, and its helper (func: a name)
                if not (isinstance(c, torch.device) and c.type == "meta")
                and "meta" not in getattr(getattr(c, "func", None), "__name__", "")]

    def _init_weights(self, module: torch.nn.Module) -> None:
        """Nothing: every module was initialised by the vspec build, as its kind says."""

    def _move_missing_keys_from_meta_to_device(self, *args, **kwargs) -> None:
        """transformers' move of what was not loaded off the meta device, where something is on it (never, as
        built here: its move would also empty the non-persistent buffers the build computed)."""
        if any(t.is_meta for t in chain(self.parameters(), self.buffers())):
            super()._move_missing_keys_from_meta_to_device(*args, **kwargs)

    def _set_gradient_checkpointing(self, enable: bool = True, *args: Any, **kwargs: Any) -> None:
        """transformers' `activation_checkpointing_enable()` / `_disable()` (Trainer's gradient_checkpointing=True): the
        vspec model's own, over every block (`set_grad_checkpointing`; non-reentrant, whatever function is given)."""
        getattr(self, _PREFIX).set_grad_checkpointing(enable)

    def get_input_embeddings(self) -> torch.nn.Module:
        """The word embedding of a text body (HF's input embeddings)."""
        embedder = getattr(self, _PREFIX).embedder
        if not hasattr(embedder, "word"):
            raise NotImplementedError(f"{type(self).__name__}: an image model has no input embeddings")
        return embedder.word

    def _vspec(self, inputs: torch.Tensor | None, pixel_values: torch.Tensor | None, **kwargs: Any):
        """The vspec model called on token ids or images (given once) with HF's keywords (Nones left out)."""
        if (inputs is None) == (pixel_values is None):
            raise TypeError(f"{type(self).__name__}: give input_ids (a text body) or pixel_values (an image body), "
                            "once")
        return getattr(self, _PREFIX)(inputs if pixel_values is None else pixel_values,
                                     **{k: v for k, v in kwargs.items() if v is not None})

    def _classify(self, output_class: type, inputs: torch.Tensor | None, pixel_values: torch.Tensor | None,
                  labels: torch.Tensor | None, return_dict: bool | None, output_hidden_states: bool | None,
                  **kwargs: Any):
        """The classification forward: the vspec model's loss (HF's problem_type rule, `_check_problem_type`),
        logits and hidden states, as `output_class` or, with return_dict=False, its tuple."""
        hidden = output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        if labels is not None:
            _check_problem_type(self.config.problem_type, self.config.num_labels, labels)
        out = self._vspec(inputs, pixel_values, labels=labels, output_hidden_states=bool(hidden), return_dict=True,
                          **kwargs)
        result = output_class(loss=out.loss, logits=out.logits, hidden_states=out.hidden_states)
        return result if self._return_dict(return_dict) else result.to_tuple()

    def _return_dict(self, return_dict: bool | None) -> bool:
        return return_dict if return_dict is not None else self.config.return_dict


def _check_problem_type(problem_type: str | None, num_labels: int, labels: torch.Tensor) -> None:
    """A config's problem_type must be the one HF infers from the classes and the labels (the vspec model's loss,
    `vspec.nn.outputs.sequence_loss`, infers it): a ValueError in one line where it is not."""
    if problem_type is None:
        return
    inferred = "regression" if num_labels == 1 else \
        "single_label_classification" if not labels.is_floating_point() else "multi_label_classification"
    if problem_type != inferred:
        raise ValueError(f"problem_type {problem_type!r} with {num_labels} labels of dtype "
                         f"{str(labels.dtype).removeprefix('torch.')}: the vspec model's loss is {inferred!r} "
                         f"(vspec.nn.outputs.sequence_loss)")


class VspecModel(VspecPreTrainedModel):
    """`AutoModel` of a vspec folder: the body, its hidden states and the head's pooled features (the head at 0
    classes: BERT's pooler output, SoT's representation, the last token of GPT), as `BaseModelOutputWithPooling`
    (last_hidden_state, after the final norm; pooler_output; hidden_states: the embedding output, then each
    block's)."""

    text = None

    def __init__(self, config: VspecConfig):
        super().__init__(config, num_classes=0)

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                pixel_values: torch.Tensor | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None):
        """The body's last hidden state and pooled features (`BaseModelOutputWithPooling`)."""
        out = self._vspec(input_ids, pixel_values, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          position_ids=position_ids, output_hidden_states=True, return_dict=True)
        hidden = output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        result = BaseModelOutputWithPooling(last_hidden_state=out.hidden_states[-1], pooler_output=out.logits,
                                            hidden_states=out.hidden_states if hidden else None)
        return result if self._return_dict(return_dict) else result.to_tuple()


class VspecForSequenceClassification(VspecPreTrainedModel):
    """`AutoModelForSequenceClassification` of a vspec text spec: `SequenceClassifierOutput` (loss with labels,
    logits, hidden_states)."""

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None):
        """The logits of token ids (and the loss with `labels`), as transformers returns them."""
        return self._classify(SequenceClassifierOutput, input_ids, None, labels, return_dict, output_hidden_states,
                              attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids)


class VspecForImageClassification(VspecPreTrainedModel):
    """`AutoModelForImageClassification` of a vspec image spec: `ImageClassifierOutput` (loss with labels, logits,
    hidden_states)."""

    text = False
    main_input_name = "pixel_values"

    def forward(self, pixel_values: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                output_hidden_states: bool | None = None, return_dict: bool | None = None):
        """The logits of images (and the loss with `labels`), as transformers returns them."""
        return self._classify(ImageClassifierOutput, None, pixel_values, labels, return_dict, output_hidden_states)


_AUTO = ((AutoModel, VspecModel), (AutoModelForSequenceClassification, VspecForSequenceClassification),
        (AutoModelForImageClassification, VspecForImageClassification))


def register_hf() -> list[str]:
    """Register `VspecConfig` (model_type "vspec") with transformers' `AutoConfig`, and `VspecModel`,
    `VspecForSequenceClassification` and `VspecForImageClassification` with `AutoModel`,
    `AutoModelForSequenceClassification` and `AutoModelForImageClassification`, so that a folder that
    `save_pretrained` (or `Trainer.save_model`) wrote of one, or `vspec.save_pretrained` of any vspec model, loads
    with `from_pretrained` and runs in `pipeline(...)`. Opt-in: importing vspec registers nothing; a second call
    registers nothing again. Returns the names of the classes registered.

    Returns:
        The model classes' names, in the order above.
    """
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # extra: vspec[text]

    if _MODEL_TYPE not in CONFIG_MAPPING:
        AutoConfig.register(_MODEL_TYPE, VspecConfig)
    for auto, cls in _AUTO:
        if VspecConfig not in auto._model_mapping._extra_content:
            auto.register(VspecConfig, cls)
    return [cls.__name__ for _, cls in _AUTO]
