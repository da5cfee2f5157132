"""Build a Sapiens2 task model from a hub id, a local ``save_pretrained`` directory or a size preset.

What happens to the weights is returned as a :class:`LoadReport`:

- same task, same labels: everything loads;
- same task, other labels (e.g. 308 -> COCO-17 or COCO-WholeBody keypoints): backbone and head load, and
  each output row is copied from the checkpoint row of the same name where there is one (a checkpoint
  without names in its config gets the task's released names when it has their count: the bundled
  Sapiens2-308 keypoints, the 29 Sapiens2 classes); a label the checkpoint lacks that is merged from several of
  its labels (``ModelTarget.label_sources``: a class set's merge) starts from their rows (``merged_row``);
- pretrain-only backbone (``Sapiens2Model``) or another task's checkpoint: the backbone
  loads and a new head with the released layout for that size is built;
- no ``pretrained``: random init from ``size`` (for tests, demos and scaling checks).

This layer knows no task names: the caller (``sapiens2_ft.tasks.registry.build_task_model``) passes the
transformers class, the labels, the released head layouts and label names of its task.
"""

from __future__ import annotations

import logging
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch
from torch import nn
from transformers import Sapiens2Config, Sapiens2HeadConfig

from datamodules.errors import NotFound
from sapiens2_ft.models import presets
from sapiens2_ft.resources import shipped_asset


class PretrainedNotFoundError(NotFound):
    """``model.pretrained`` is neither a local directory nor a reachable hub id."""


class WeightsMismatchError(ValueError):
    """A weights file does not hold the tensors its config describes; the message lists the differences."""


@contextmanager
def own_load_report():
    """transformers' load report (a table of MISSING / UNEXPECTED keys, logged by ``transformers.modeling_utils``)
    left out: ``from_pretrained_checked`` refuses any such difference itself, and the run's ``LoadReport`` says in its
    own lines where the backbone and each head row came from. Its errors still raise."""
    logger = logging.getLogger("transformers.modeling_utils")
    # A filter, not a level: at WARNING or above that logger also lists every layer of the model as "not sharded".
    drop = logging.Filter()
    drop.filter = lambda record: "LOAD REPORT" not in str(record.msg)
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def from_pretrained_checked(cls, path: str, backbone_only: bool = False, **kwargs):
    """``cls.from_pretrained`` that refuses weights with missing, unexpected or misshaped tensors
    (transformers would initialise missing ones at random with only a warning). ``backbone_only``: a
    pretrain-only checkpoint, whose task head is expected to be new."""
    with own_load_report():
        model, info = cls.from_pretrained(path, output_loading_info=True, trust_remote_code=False, **kwargs)
    missing = sorted(info.get("missing_keys") or [])
    if backbone_only:
        missing = [k for k in missing if k.startswith("model.")]
    problems = {"missing": missing, "unexpected": sorted(info.get("unexpected_keys") or []),
                "shape differs": sorted(str(k) for k in info.get("mismatched_keys") or [])}
    if any(problems.values()):
        listing = "".join(f"\n  {kind} ({len(keys)}): {', '.join(keys[:10])}{' ...' if len(keys) > 10 else ''}"
                          for kind, keys in problems.items() if keys)
        raise WeightsMismatchError(f"weights in {path} do not match its config ({cls.__name__}){listing}")
    return model


@dataclass
class LoadReport:
    source: str
    backbone: str  # "pretrained" | "random"
    head: str  # "pretrained" | "transferred" | "new" | "random"
    transferred: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)  # ``name <- source + source``: rows started from others
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        """The model's origin in its first line (where its head came from, too, when a note starts ``head:``), then
        the rows transferred by name and the other notes."""
        first = f"model from {self.source}: backbone {self.backbone}, head {self.head}"
        head = [note for note in self.notes if note.startswith(HEAD_NOTE)]
        lines = [first + "".join(f": {note[len(HEAD_NOTE):]}" for note in head)]
        if self.head == "transferred":
            lines.append(f"  output rows transferred by name ({len(self.transferred)}): {', '.join(self.transferred)}")
            if self.merged:
                lines.append(f"  output rows merged from the rows of their sources ({len(self.merged)}): "
                             f"{'; '.join(self.merged)}")
            lines.append(f"  output rows new ({len(self.new)}): {', '.join(self.new) or '-'}")
        lines += [f"  {note}" for note in self.notes if note not in head]
        return "\n".join(lines)


HEAD_NOTE = "head: "  # a LoadReport note that says where the head came from (its first line carries it)


def resolve_pretrained(pretrained: str, key: str = "model.pretrained") -> str:
    """A local directory as is; a shipped ``assets/...`` path (the demo backbone, from any folder); a hub id
    through the local cache or the hub (errors name the config ``key``)."""
    if Path(pretrained).is_dir():
        return pretrained
    shipped = shipped_asset(pretrained)
    if shipped is not None and shipped.is_dir():
        return str(shipped)
    looks_local = pretrained.startswith((".", "/", "~")) or pretrained.count("/") != 1
    if looks_local:
        raise PretrainedNotFoundError(f"{key}: directory '{pretrained}' does not exist")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(pretrained, allow_patterns=["*.json", "*.safetensors", "*.yaml"])
    except Exception as err:  # offline, gated, unknown repo: all end the same way for the user
        raise PretrainedNotFoundError(fetch_failure(pretrained, err, key)) from err


GATED = ("facebook/sapiens",)  # repositories behind a licence to accept (the Sapiens2 models); others are open


def fetch_failure(repo_id: str, err: Exception, key: str) -> str:
    """Why ``repo_id`` could not be had and what to do: not in this machine's cache with the Hub out of reach
    (offline), or what the Hub answered; the licence for the gated Sapiens2 repositories only; a copy on disk."""
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    if isinstance(err, (LocalEntryNotFoundError, OfflineModeIsEnabled)):
        why = ("HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the Hub could not be reached")
        said = f"'{repo_id}' is not in this machine's Hugging Face cache and {why}."
    else:
        said = f"could not fetch '{repo_id}' from the Hugging Face Hub ({type(err).__name__}: " \
               f"{(str(err).splitlines() or [''])[0]})."
    gated = (f" The Sapiens2 models are gated: accept the licence on https://huggingface.co/{repo_id} and run "
             f"`hf auth login`." if repo_id.startswith(GATED) else "")
    verb = "set" if "." in key else "pass"  # a config key, or a command's flag
    return (f"{said}{gated} Without the Hub here: `hf download {repo_id} --local-dir DIR` on a machine with access, "
            f"copy DIR here and {verb} `--{key} DIR` (docs/models.md).")


def _is_named(labels: Sequence[str]) -> bool:
    return not all(re.fullmatch(r"LABEL_\d+", name) for name in labels)


def label_rows(config: Sapiens2Config, released_labels: Sequence[str] = ()) -> dict[str, int]:
    """Label name -> output row of a checkpoint's head (unnamed rows: ``released_labels`` when their count fits;
    {} when the rows have no names)."""
    names = [config.id2label[i] for i in range(config.num_labels)] if config.id2label else []
    if names and _is_named(names):
        return {name: i for i, name in enumerate(names)}
    if released_labels and config.num_labels == len(released_labels):
        return {name: i for i, name in enumerate(released_labels)}
    return {}


def _new_predictor(old: nn.Conv2d, num_labels: int) -> nn.Conv2d:
    new = nn.Conv2d(old.in_channels, num_labels, kernel_size=old.kernel_size)
    nn.init.kaiming_normal_(new.weight, mode="fan_out", nonlinearity="relu")
    nn.init.zeros_(new.bias)
    return new.to(device=old.weight.device, dtype=old.weight.dtype)


def merged_row(weight: torch.Tensor, bias: torch.Tensor, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The predictor row of a class merged from ``rows``: the mean of their weights, the mean of their biases
    plus ``log k`` (k sources), so that its logit is ``mean(z_s) + log k`` where theirs are ``z_s``.

    The class's probability should start as the sum of its sources', which softmax gives to a logit of
    ``logsumexp(z_s)``; a linear row cannot hold a logsumexp. ``mean + log k`` is the row that equals it wherever the
    sources' logits agree, and stays below it otherwise (Jensen: ``mean(z) <= log mean(exp z)``), by at most
    ``max(z) - mean(z)``: the merged class starts never more confident than its sources together, and keeps their
    logits' scale (a sum of rows would multiply it by k)."""
    index = torch.as_tensor(list(rows), device=weight.device)
    return weight[index].mean(0), bias[index].mean(0) + math.log(len(rows))


def _transfer_rows(model, labels: Sequence[str], released_labels: Sequence[str], report: LoadReport,
                   sources: Mapping[str, Sequence[str]]) -> None:
    """Replace the head's last layer with one row per label, copying rows by name; a label of ``sources`` that the
    checkpoint lacks starts from its sources' rows (``merged_row``), when it has them all."""
    rows = label_rows(model.config, released_labels)
    old = model.decode_head.predictor
    new = _new_predictor(old, len(labels))
    with torch.no_grad():
        for i, name in enumerate(labels):
            if name in rows:
                new.weight[i] = old.weight[rows[name]]
                new.bias[i] = old.bias[rows[name]]
                report.transferred.append(name)
            elif sources.get(name) and all(s in rows for s in sources[name]):
                new.weight[i], new.bias[i] = merged_row(old.weight, old.bias, [rows[s] for s in sources[name]])
                report.merged.append(f"{name} <- {' + '.join(sources[name])}")
            else:
                report.new.append(name)
    model.decode_head.predictor = new
    report.head = "transferred"


def head_layout(heads: dict[str, dict], size: str | None) -> dict:
    """The released head layout of a backbone ``size`` among a task's ``heads`` (the 0.4b one for another size)."""
    return dict(heads.get(size or "0.4b", heads["0.4b"]))


def configure(config: Sapiens2Config, labels: Sequence[str], image_size, pos_embed_rescale, flip_pairs,
              head: dict | None, heads: dict[str, dict]) -> Sapiens2Config:
    """Set a model config's labels, image size, RoPE augmentation, flip pairs and (when new) head layout."""
    config.num_labels = len(labels)
    config.id2label = {i: name for i, name in enumerate(labels)}
    config.label2id = {name: i for i, name in enumerate(labels)}
    config.image_size = list(image_size)
    config.pos_embed_rescale = pos_embed_rescale
    if flip_pairs is not None:
        config.flip_pairs = [list(p) for p in flip_pairs]
    # A pretrain-only checkpoint loads with an empty head config (every field None), not None.
    if head is not None or config.head_config is None or not config.head_config.upsample_out_channels:
        size = presets.size_of(config.hidden_size, config.num_hidden_layers)
        config.head_config = Sapiens2HeadConfig(**(head or head_layout(heads, size)))
    config.head_config._init_scale_final_input_size(config.image_size, config.patch_size)  # no-op once set
    return config


@dataclass(frozen=True)
class ModelSource:
    """Where a task model's weights come from and how it is set up: the run's ``model.*`` keys.

    Args:
        pretrained: Hub id or local ``save_pretrained`` directory; None: random init from ``size``.
        size: Backbone preset when ``pretrained`` is unset.
        head: Head layout override (``Sapiens2HeadConfig`` kwargs); None: the released layout of the size.
        pos_embed_rescale: RoPE coordinate augmentation of pretraining; None: off.
        attn_implementation: ``sdpa`` or ``eager``.
    """

    pretrained: str | None = None
    size: str | None = None
    head: dict | None = None
    pos_embed_rescale: float | None = None
    attn_implementation: str = "sdpa"


@dataclass(frozen=True)
class ModelTarget:
    """What a task's model must be (this layer knows no task names: the task registry gives all of it).

    Args:
        model_class: The transformers class (a ``Sapiens2For<Task>``).
        labels: Its output rows (keypoint or class names, or the fixed channels).
        image_size: The network input (H, W).
        heads: The released head layout per backbone size (a new head takes the one of its size).
        flip_pairs: Mirror pairs of the rows (pose), recorded in the config.
        released_labels: The names of a checkpoint's unnamed rows (when their count fits).
        rows_by_name: The outputs are a label set whose rows a checkpoint of other labels hands over by name;
            False for fixed output channels.
        holds_head: Whether a checkpoint of ``model_class`` holds this task's head (tasks may share a class); when
            not, it gives its backbone only, as another class's does (None: every checkpoint of the class holds it).
        label_sources: Labels a checkpoint lacks that start from the rows of several of its labels (a class merged
            from others: ``merged_row``), by name.
        task: The task's name, for messages.
        label_kind: What one label is, for messages (``keypoint``, ``class``, ``output``).
    """

    model_class: type
    labels: Sequence[str]
    image_size: Sequence[int]
    heads: Mapping[str, dict]
    flip_pairs: Sequence[Sequence[int]] | None = None
    released_labels: Sequence[str] = ()
    rows_by_name: bool = True
    holds_head: Callable[[Sapiens2Config], bool] | None = None
    label_sources: Mapping[str, Sequence[str]] = field(default_factory=dict)
    task: str = ""
    label_kind: str = "output"


def build_model(target: ModelTarget, source: ModelSource = ModelSource()) -> tuple[nn.Module, LoadReport]:
    """Build ``target.model_class`` for ``target.labels`` from ``source``: see the module docstring for what
    happens to the weights."""
    labels, heads = list(target.labels), dict(target.heads)
    model_class, image_size, size, head = target.model_class, target.image_size, source.size, source.head
    pos_embed_rescale, flip_pairs, attn_implementation = (source.pos_embed_rescale, target.flip_pairs,
                                                          source.attn_implementation)
    if source.pretrained is None:
        if size not in presets.BACKBONES:
            raise ValueError(f"model.size must be one of {sorted(presets.BACKBONES)} when model.pretrained is not set")
        config = Sapiens2Config(**presets.BACKBONES[size], attn_implementation=attn_implementation)
        config.head_config = Sapiens2HeadConfig(**(head or head_layout(heads, size)))
        configure(config, labels, image_size, pos_embed_rescale, flip_pairs, None, heads)
        return model_class(config), LoadReport(f"size preset '{size}'", backbone="random", head="random")

    path = resolve_pretrained(source.pretrained)
    config = Sapiens2Config.from_pretrained(path, trust_remote_code=False)
    architecture = (config.architectures or ["Sapiens2Model"])[0]
    report = LoadReport(source.pretrained, backbone="pretrained", head="pretrained")

    if architecture == model_class.__name__ and head is None and (target.holds_head is None
                                                                  or target.holds_head(config)):
        model = from_pretrained_checked(model_class, path, attn_implementation=attn_implementation)
        old_labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
        if target.rows_by_name and old_labels != labels:
            _transfer_rows(model, labels, target.released_labels, report, target.label_sources)
        configure(model.config, labels, image_size, pos_embed_rescale, flip_pairs, None, heads)
        return model, report

    report.head = "new"
    report.new = labels
    configure(config, labels, image_size, pos_embed_rescale, flip_pairs, head, heads)
    config.architectures = [model_class.__name__]
    if architecture == "Sapiens2Model":
        model = from_pretrained_checked(model_class, path, backbone_only=True, config=config,
                                        attn_implementation=attn_implementation)
    else:  # another task's checkpoint: keep its backbone only
        other_class = getattr(__import__("transformers"), architecture, None)  # named by the directory's config.json
        if not architecture.startswith("Sapiens2For") or other_class is None:
            raise ValueError(f"model.pretrained: {source.pretrained} holds a {architecture}, not a Sapiens2 model")
        other = from_pretrained_checked(other_class, path)
        model = model_class(config)
        model.model.load_state_dict(other.model.state_dict())
    return model, report
