"""The model card (``README.md``) of every export, with the Sapiens2 licence beside it, written from the run that
trained the weights: its checkpoint's record, ``summary.json``, ``config.yaml`` and a validation picture.

The card opens with the Hub's YAML metadata (licence, ``base_model``, ``library_name``, ``pipeline_tag``, tags and
``model-index`` with the validation metrics of the exported weights), then says what the model predicts, its labels,
its results, the data, the recipe, how to load it and its limits. Two parts are rewritten later, between HTML comment
markers: the results (``evaluate`` on an export refreshes them) and the loading example (``push_to_hub`` names the
repository in the uploaded card). The card uploaded to the Hub leaves out the run's command line (kept in the local
card) and names no absolute path, user or host name, token or URL credential (``public_text.py``).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from types import SimpleNamespace

import yaml
from transformers import Sapiens2Config

from datamodules.boundary.files import read_json, read_text, read_yaml
from datamodules.boundary.folders import handed_file
from datamodules.boundary.writes import copy_file, write_text
from sapiens2_ft.models.head_size import output_scale
from sapiens2_ft.resources import shipped_asset
from sapiens2_ft.tasks.registry import TASK_KEY, TASKS, takes_person_boxes, task_of_config, task_spec
from sapiens2_ft.training.public_text import public_text
from sapiens2_ft.training.run_dir import latest_config

CARD_FILE = "README.md"
LICENCE_FILE = "LICENSE-sapiens2.md"  # the copy bundled with the keypoint sets (datamodules/keypoints/)
PICTURE_FILE = "predictions.png"
LICENSE_LINK = "https://github.com/facebookresearch/sapiens2/blob/main/LICENSE.md"
SAPIENS2_URL = "https://github.com/facebookresearch/sapiens2"
TAGS = ("sapiens", "sapiens2", "human-centric", "sapiens2-ft")
RESULTS, USAGE, COMMAND = "results", "usage", "command"  # the rewritable sections (the command: local only)
FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def section(name: str, text: str) -> str:
    return f"<!-- sapiens2-ft:{name} -->\n{text.strip()}\n<!-- /sapiens2-ft:{name} -->"


def replace_section(card: str, name: str, text: str) -> str:
    pattern = re.compile(rf"<!-- sapiens2-ft:{name} -->\n.*?<!-- /sapiens2-ft:{name} -->", re.S)
    return pattern.sub(lambda _: section(name, text), card, count=1)


def split_card(card: str) -> tuple[dict, str]:
    """(metadata, body) of a card; ({}, card) without front matter."""
    match = FRONT_MATTER.match(card)
    if not match:
        return {}, card
    return yaml.safe_load(match.group(1)) or {}, card[match.end():]


def join_card(metadata: dict, body: str) -> str:
    return "---\n" + yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True) + "---\n" + body


def hub_id_of(pretrained: str | None) -> str | None:
    """The Hub id a ``model.pretrained`` value names: the value itself, or the repo of a Hub cache snapshot path."""
    if not pretrained:
        return None
    cached = re.search(r"models--([\w.-]+)--([\w.-]+)[/\\]snapshots", str(pretrained))
    if cached:
        return f"{cached.group(1)}/{cached.group(2)}"
    looks_local = (str(pretrained).startswith((".", "/", "~")) or Path(pretrained).exists()
                   or shipped_asset(pretrained) is not None)
    return None if looks_local or str(pretrained).count("/") != 1 else str(pretrained)


def run_dir_of(checkpoint: Path) -> Path | None:
    """The run directory of a checkpoint saved in ``<run_dir>/checkpoints/`` (None elsewhere)."""
    run = Path(checkpoint).resolve().parent.parent
    return run if Path(checkpoint).resolve().parent.name == "checkpoints" and (run / "config.yaml").is_file() else None


def read_run(run_dir: Path | None) -> tuple[dict, dict]:
    """(summary.json, the latest segment's config: ``config.yaml`` or a resumed run's ``config.resumeN.yaml``) of a
    run directory; empty where missing."""
    if run_dir is None:
        return {}, {}
    summary = read_json(run_dir / "summary.json") if (run_dir / "summary.json").is_file() else {}
    recipe = latest_config(run_dir)
    config = read_yaml(recipe) if recipe.is_file() else {}
    return summary if isinstance(summary, dict) else {}, config if isinstance(config, dict) else {}


def exported_metrics(info, summary: dict) -> dict[str, float]:
    """The validation metrics of the checkpoint's own weights: its record's latest validation when it ran at the
    checkpoint's step, else the run's final metrics when the run ended at that step; {} when neither."""
    validation = info.validation or {}
    if validation.get("step") == info.global_step and validation.get("metrics"):
        return dict(validation["metrics"])
    if summary.get("global_step") == info.global_step and summary.get("metrics"):
        return {k: float(v) for k, v in summary["metrics"].items()}
    return {}


def dataset_entry(root: str | Path | None, variant: str | None = None) -> dict:
    """model-index's dataset of the validation split of the data folder ``root``: the folder's name (and how it was
    scored when not as training validates it, e.g. on detected boxes)."""
    folder = Path(str(root or "data")).name
    return {"name": f"{folder} ({variant})" if variant else folder, "type": folder, "split": "validation"}


def result_entry(task: str, dataset: dict, metrics: dict[str, float]) -> dict:
    spec = task_spec(task)
    return {"task": {"type": spec.export.pipeline_tag or task, "name": task}, "dataset": dict(dataset),
            "metrics": [{"type": name, "value": float(value), "name": name} for name, value in metrics.items()]}


def metadata(info, name: str, metrics: dict[str, float], dataset: dict) -> dict:
    spec = task_spec(info.task)
    meta: dict = {"license": "other", "license_name": "sapiens2-license", "license_link": LICENSE_LINK}
    base = hub_id_of(info.hyper_parameters.get("pretrained"))
    if base:
        meta["base_model"] = base
    meta["library_name"] = "transformers"
    if spec.export.pipeline_tag:
        meta["pipeline_tag"] = spec.export.pipeline_tag
    meta["tags"] = [*TAGS, info.task]
    if metrics:
        meta["model-index"] = [{"name": name, "results": [result_entry(info.task, dataset, metrics)]}]
    return meta


def results_text(meta: dict) -> str:
    results = [r for entry in meta.get("model-index") or [] for r in entry.get("results", [])]
    if not results:
        return ("## Results\n\nNo validation of these weights was recorded; `sapiens2-ft evaluate --model THIS_DIR "
                "--config RECIPE` scores them and writes the results here.")
    names = list(dict.fromkeys(m["name"] for r in results for m in r.get("metrics", [])))
    lines = ["## Results", "", "| dataset (validation split) | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for result in results:
        values = {m["name"]: f"{m['value']:.4f}" for m in result.get("metrics", [])}
        lines.append(f"| {result.get('dataset', {}).get('name', '')} | "
                     + " | ".join(values.get(name, "") for name in names) + " |")
    lines += ["", "Measured by sapiens2-ft on each dataset's validation split, as training validates: when the run "
                  "saved these weights, or later by `sapiens2-ft evaluate` on this folder. Not a public benchmark."]
    return "\n".join(lines)


def post_process_text(task: str, scale: float) -> str:
    """What transformers' own post-processing does with this model's outputs (a whole-image task), given its maps'
    ``scale`` of the input size (``models.head_size.output_scale``); empty for a task of person crops."""
    spec = task_spec(task)
    method, resize = spec.export.post_process, spec.resize
    if resize is None:
        return ""
    shown = "the input size" if scale == 1.0 else f"{scale:g} of the input size"
    crop = ("remove the letterbox the processor added (the image fitted inside the input, centred: its box is "
            "int(h * s) x int(w * s) pixels in the middle, s = min(H / h, W / w) for an h x w image and an H x W "
            "input) and resize to the image")
    if spec.transformers_post_processes(scale):
        sizes = "source_sizes" if spec.export.unpads else "target_sizes"
        return (f"`processor.{method}(outputs, {sizes}=[(h, w)])` turns the outputs into results at an h x w image's "
                f"size, undoing the processor's {resize} (its maps come out at {shown}).")
    if method is None:
        why = "transformers has no post-processing for this task (its class's is another task's)"
    elif not spec.export.unpads:
        why = f"`processor.{method}` only resizes: it keeps the letterbox's padding"
    else:
        why = (f"its maps come out at {shown}, and `processor.{method}` removes the letterbox in input pixels: it "
               f"fails on them")
    return (f"The processor letterboxes the image as training did (`do_pad`), but {why}. Resize the outputs to the "
            f"input size, {crop}, or use sapiens2-ft's predict below, which does.")


def usage_text(task: str, model: str, scale: float = 1.0) -> str:
    """The card's loading example; ``scale``: the model's maps' size against its input (its head's)."""
    spec = task_spec(task)
    top_down = takes_person_boxes(task)
    people = " --detector" if top_down else ""
    crop = "  # on one person's crop (top-down)" if top_down else ""
    after = post_process_text(task, scale)
    return f"""## How to use

With `transformers` alone (its Sapiens2 classes; the image processor resizes and normalises as training did):

```python
from PIL import Image
from transformers import AutoImageProcessor, {spec.export.auto_class}

model = {spec.export.auto_class}.from_pretrained("{model}")
processor = AutoImageProcessor.from_pretrained("{model}")
outputs = model(**processor(images=Image.open("photo.jpg"), return_tensors="pt")){crop}
```
{chr(10) + after + chr(10) if after else ""}
With sapiens2-ft (`pip install sapiens2-ft`), the whole pipeline of its `predict` (person boxes, flip test,
decoding, pictures):

```python
import sapiens2_ft

model = sapiens2_ft.load("{model}")
results = model.predict("photo.jpg")
```

```bash
sapiens2-ft predict --model {model} --input photos/ --out predictions/{people}
sapiens2-ft app --model {model}   # a web demo (pip install 'sapiens2-ft[app]')
```"""


def labels_text(info) -> str:
    spec, labels = task_spec(info.task), info.labels
    kind = {"keypoint": "keypoints", "class": "classes"}.get(spec.model.label_kind, "output channels")
    named = f" (keypoint set `{info.keypoints['name']}`)" if (info.keypoints or {}).get("name") else ""
    named += f" (class set `{info.classes['name']}`)" if (info.classes or {}).get("name") else ""
    shown = ", ".join(labels[:40]) + (f", ... ({len(labels) - 40} more, in `config.json`)" if len(labels) > 40 else "")
    return f"## Labels\n\n{len(labels)} {kind}{named}: {shown}."


PER_CLASS = "per_class.csv"  # the validation's table of each class (``diagnostics/step_<N>/``), where a task has one


def per_class_text(run_dir: Path | None, step: int) -> str:
    """The IoU and accuracy of each class by name at the exported ``step`` (its validation's ``per_class.csv``);
    empty when that validation wrote none."""
    path = run_dir / "diagnostics" / f"step_{step}" / PER_CLASS if run_dir is not None else None
    if path is None or not path.is_file():
        return ""
    rows = list(csv.DictReader(io.StringIO(read_text(path))))
    cell = lambda v: f"{float(v):.4f}" if v else "-"  # noqa: E731  (empty: the class was never seen)
    lines = [f"| {row['class']} | {cell(row['iou'])} | {cell(row['accuracy'])} | {row['gt_pixels']} |" for row in rows]
    return "\n".join([f"## Per class\n\nEach class on the validation split at step {step:,} (- : neither labelled nor "
                      "predicted there):\n", "| class | IoU | accuracy | labelled pixels |", "|---|---|---|---|", *lines])


def data_text(task: str, config: dict, summary: dict) -> str:
    data = config.get("data") or {}
    if not data:
        return ""
    lines = ["## Training data", "", f"- folder: `{data.get('root')}`"]
    samples = summary.get("samples") or {}
    if samples:
        unit = "person instances" if takes_person_boxes(task) else "images"
        lines.append(f"- samples: " + ", ".join(f"{split} {count:,}" for split, count in samples.items()) + f" ({unit})")
    for name, mix in (summary.get("train_datasets") or {}).items():
        lines.append(f"- mix: `{name}`: {mix['samples']:,} samples x repeat {mix['repeat']}, "
                     f"{mix['drawn']:,} drawn in the run")
    if data.get("synthetic"):
        lines.append("- rendered by sapiens2-ft's synthetic generator (the demo data), not photographs")
    return "\n".join(lines)


def recipe_text(info, config: dict, summary: dict) -> str:
    hp = info.hyper_parameters
    optim, trainer = hp.get("optim") or {}, config.get("trainer") or {}
    started = hp.get("init_from") or hp.get("pretrained") or "random initialisation"
    rows = [("started from", f"`{started}`"), ("steps", f"{info.global_step:,} (exported checkpoint)"
                                                         + (f" of {summary['global_step']:,}" if summary else "")),
            ("learning rate", optim.get("lr")), ("batch size", (config.get("data") or {}).get("batch_size")),
            ("input size (H x W)", " x ".join(str(v) for v in hp.get("input_size") or [])),
            ("precision", trainer.get("precision")), ("hardware", summary.get("hardware")),
            ("training time", f"{summary['fit_wall_time_s'] / 60:.1f} min" if summary.get("fit_wall_time_s") else None)]
    lines = ["## Recipe", ""]
    if summary.get("command"):
        lines += [section(COMMAND, "\n".join(["```bash", summary["command"], "```"])), ""]
    lines += ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows if v not in (None, "")]
    if config:
        lines += ["", "<details><summary>The whole recipe (the run's <code>config.yaml</code>)</summary>", "",
                  "```yaml", yaml.safe_dump(config, sort_keys=False).strip(), "```", "", "</details>"]
    return "\n".join(lines)


def limits_text(info, config: dict) -> str:
    lines = ["## Limits", "",
             f"- It knows only the labels above and the kind of images it was trained on; the results were measured "
             f"on the run's own validation split, which says little about other photos.",
             f"- It runs at {' x '.join(str(v) for v in info.hyper_parameters.get('input_size') or [])} (H x W); larger "
             f"images are resized to it."]
    if takes_person_boxes(info.task):
        lines.append("- Top-down: it needs a box per person (`--detector`, `--boxes_from_seg` or `--boxes` of "
                     "`sapiens2-ft predict`); without one the whole image is taken as one person.")
    if (config.get("data") or {}).get("synthetic"):
        lines.append("- Trained on synthetic renders: a demonstration of the workflow, not a model for real photos.")
    return "\n".join(lines)


def licence_text() -> str:
    return ("## Licence\n\nDistributed under the Sapiens2 License of the Sapiens2 models and code it builds on "
            f"([{LICENCE_FILE}]({LICENCE_FILE}), beside this card; [upstream]({LICENSE_LINK})), which asks "
            "that a copy of it goes with every copy of these weights, and restricts their use (its section 1.b.vi: no "
            "surveillance, biometric processing, identifying people, deepfakes, ...): read it before you deploy "
            "them. sapiens2-ft, the code that fine-tuned them, is under the Apache License 2.0.")


def copy_licence(out: Path) -> Path:
    """The Sapiens2 licence bundled with the keypoint sets, without its note on which files it covers there."""
    import datamodules.keypoints as keypoint_sets

    text = read_text(Path(keypoint_sets.__file__).parent / LICENCE_FILE)
    return write_text(out, LICENCE_FILE, text[text.index("# Sapiens2 License"):])


def copy_picture(run_dir: Path | None, out: Path) -> Path | None:
    """The run's first validation panel (``overlays/*_0.png``, a regular file: a link is not followed) as the card's
    picture."""
    panels = sorted((run_dir / "overlays").glob("*_0.png")) if run_dir is not None else []
    if not panels:
        return None
    return copy_file(handed_file(panels[0].parent, panels[0].name), out, PICTURE_FILE)


def write_card(out: Path, info) -> Path:
    """``out/README.md`` for the export of checkpoint ``info`` (``models.checkpoints.CheckpointInfo``), the
    Sapiens2 licence and the run's picture beside it."""
    out = Path(out)
    run_dir = run_dir_of(info.path)
    summary, config = read_run(run_dir)
    spec = task_spec(info.task)
    name = f"{run_dir.parent.name}-{run_dir.name}" if run_dir is not None else out.name
    metrics = exported_metrics(info, summary)
    meta = metadata(info, name, metrics, dataset_entry((config.get("data") or {}).get("root")))
    copy_licence(out)
    picture = copy_picture(run_dir, out)
    monitor, mode = spec.training.monitor
    best = bool(summary.get("best_checkpoint")) and Path(summary["best_checkpoint"]).resolve() == info.path.resolve()
    chosen = f"the run's best by {monitor.removeprefix('val/')} ({mode}), " if best else ""
    intro = (f"A [Sapiens2]({SAPIENS2_URL}) {info.task} model fine-tuned with sapiens2-ft: it predicts "
             f"{spec.export.predicts}. The weights exported here are {chosen}at step {info.global_step:,}.")
    parts = [f"# {name}", intro, labels_text(info), section(RESULTS, results_text(meta)),
             per_class_text(run_dir, info.global_step)]
    if picture is not None:
        parts.append(f"![Validation samples of the run: input, ground truth and prediction]({PICTURE_FILE})\n\n"
                     "Validation samples at the run's last validation.")
    scale = output_scale(Sapiens2Config.from_dict(info.model_config))
    parts += [data_text(info.task, config, summary), recipe_text(info, config, summary), section(USAGE, usage_text(
        info.task, str(out), scale)), limits_text(info, config), licence_text()]
    card = join_card(meta, "\n" + "\n\n".join(p for p in parts if p) + "\n")
    return write_text(out, CARD_FILE, card)


def read_card(directory: Path) -> str | None:
    """An export's card when sapiens2-ft wrote it (it has the results section), else None."""
    try:
        card = read_text(handed_file(Path(directory), CARD_FILE))
    except FileNotFoundError:
        return None
    return card if f"<!-- sapiens2-ft:{RESULTS} -->" in card else None


def public_card(directory: Path, repo_id: str | None = None) -> str | None:
    """The export's card as published (uploaded to ``repo_id``, or copied into a Space): the run's command line is
    left out and nothing names the machine it ran on (``public_text``); with ``repo_id``, its model-index and
    loading example name the repository."""
    card = read_card(directory)
    if card is None:
        return None
    meta, body = split_card(card)
    if repo_id is not None:
        for entry in meta.get("model-index") or []:
            entry["name"] = repo_id.split("/")[-1]
        task = export_task(directory)
        if task in TASKS:
            scale = output_scale(Sapiens2Config.from_dict(read_json(handed_file(Path(directory), "config.json"))))
            body = replace_section(body, USAGE, usage_text(task, repo_id, scale))
    body = re.sub(rf"<!-- sapiens2-ft:{COMMAND} -->\n.*?<!-- /sapiens2-ft:{COMMAND} -->\n*", "", body, flags=re.S)
    return public_text(join_card(meta, body))


def export_task(directory: Path) -> str | None:
    """The task an export's ``config.json`` records (or its architecture's)."""
    config = read_json(handed_file(Path(directory), "config.json"))
    return task_of_config(SimpleNamespace(architectures=config.get("architectures"), **{TASK_KEY: config.get(TASK_KEY)}))


def refresh_results(directory: Path, task: str, metrics: dict[str, float], dataset: dict) -> Path | None:
    """``evaluate`` on an export: its card's metrics on ``dataset`` replaced (or added) by ``metrics``; None when the
    directory has no card of sapiens2-ft's."""
    card = read_card(directory)
    if card is None:
        return None
    meta, body = split_card(card)
    entries = meta.setdefault("model-index", [{"name": Path(directory).name, "results": []}])
    results = [r for r in entries[0].get("results", []) if r.get("dataset", {}).get("name") != dataset["name"]]
    entries[0]["results"] = [result_entry(task, dataset, metrics), *results]
    body = replace_section(body, RESULTS, results_text(meta))
    return write_text(directory, CARD_FILE, join_card(meta, body))
