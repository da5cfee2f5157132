"""``sapiens2-ft app --model M [--model M2 ...] [--port P]``: a web demo of fine-tuned models (Gradio, the ``app``
extra: ``pip install 'sapiens2-ft[app]'``).

``--model`` takes what ``predict`` takes (an exported directory, a hub id or a checkpoint), one per task. The models
load once, before the page opens; each photo (upload, webcam frame, clipboard) then gets the pictures ``predict``
draws, one per task and with several models the sheet, and the JSON of what they found (pose's keypoints with scores
and boxes, seg's class areas, ...); a video gets ``predict``'s video and per-frame records. Pose finds its people with
``--detector`` or ``--boxes_from_seg``, else with a seg (or matting) model among ``--model``, else takes the whole
image as one person. The page's API (``gradio_client``): ``/photo`` and ``/video``.

``--write_space DIR`` writes a Hugging Face Space running this demo instead (``app/space.py``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from datamodules.errors import NotFound
from sapiens2_ft.app.service import Demo, Limits
from sapiens2_ft.exits import console_command
from sapiens2_ft.predict.boxes import add_box_arguments, box_argument_problems, box_source, whole_image
from sapiens2_ft.predict.loading import load_inference, model_problem
from sapiens2_ft.predict.run import Model
from sapiens2_ft.problems import Problems, raise_problems


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sapiens2-ft app", description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--model", required=True, action="append",
                   help="exported dir, hub id or checkpoint, as for predict; repeat it for several tasks")
    p.add_argument("--port", type=int, default=None, help="port to serve on (default: 7860, or GRADIO_SERVER_PORT)")
    p.add_argument("--host", default=None,
                   help="address to serve on (default: 127.0.0.1, this machine only; 0.0.0.0: the network)")
    p.add_argument("--keypoints", default=None, help="pose: keypoint set when the model dir has none")
    add_box_arguments(p)
    p.add_argument("--batch_size", type=int, default=8, help="person crops (and video frames) per forward pass")
    p.add_argument("--max_megapixels", type=float, default=Limits.max_megapixels,
                   help="refuse photos larger than this (width x height / 1e6, read before decoding)")
    p.add_argument("--max_frames", type=int, default=Limits.max_frames, help="video: run the first N frames only")
    p.add_argument("--max_upload_mb", type=int, default=200, help="refuse uploads larger than this (MB)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--write_space", default=None, metavar="DIR",
                   help="write a Hugging Face Space (app.py, requirements.txt, README.md) serving --model, and exit")
    return p


def argument_problems(args) -> list[str]:
    """Every problem of the arguments seen before a model is loaded, each naming its argument."""
    problems = Problems(filter(None, [model_problem(m) for m in args.model]))
    problems += box_argument_problems(args)
    problems.check(args.batch_size >= 1, f"--batch_size: give at least 1 per forward pass, got {args.batch_size}")
    problems.check(args.max_megapixels > 0, f"--max_megapixels: must be > 0, got {args.max_megapixels}")
    problems.check(args.max_frames >= 1, f"--max_frames: give at least 1 frame, got {args.max_frames}")
    problems.check(args.max_upload_mb >= 1, f"--max_upload_mb: give at least 1 MB, got {args.max_upload_mb}")
    return problems


def load_demo(args, scratch: Path) -> Demo:
    """The models of ``--model`` (one per task) and pose's box source, loaded once."""
    raise_problems(argument_problems(args))
    models: list[Model] = []
    loaded: dict[str, tuple] = {}
    problems = Problems()
    for k, name in enumerate(args.model):
        inference, task = load_inference(name, scratch / "models" / str(k), args.keypoints, args.device)
        problems.check(task not in [m.task for m in models], f"--model: two {task} models ({name}); give one model "
                                                             f"per task")
        models.append(Model(inference, task, scratch / task))
        loaded[name] = inference, task
    takes_boxes = any(m.inference.takes_person_boxes for m in models)
    problems.check(takes_boxes or not (args.detector or args.boxes_from_seg),
                   "--detector and --boxes_from_seg are for pose models; no --model is one")
    problems.raise_any()
    if takes_boxes and not (args.detector or args.boxes_from_seg):  # a seg (or matting) model given finds the people
        args.boxes_from_seg = next((name for name, (inference, _) in loaded.items() if inference.finds_people), None)
    source = box_source(args, scratch, loaded) or whole_image
    boxes = (f"the person detector {args.detector}" if args.detector else
             f"the people {args.boxes_from_seg} finds" if args.boxes_from_seg else "the whole image is one person")
    return Demo(models, source, args.batch_size, Limits(args.max_megapixels, args.max_frames), boxes)


def start(args, block: bool = True):
    """Load the models, build the page and serve it; returns the page (``block=False``: serving in a thread)."""
    try:
        from sapiens2_ft.app.page import build_page
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in ("gradio", "gradio_client"):
            raise NotFound("sapiens2-ft app needs Gradio: pip install 'sapiens2-ft[app]'") from None
        raise
    scratch = Path(tempfile.mkdtemp(prefix="sapiens2-ft-app-"))
    demo = load_demo(args, scratch)
    page = build_page(demo, args.model, scratch)
    page.launch(server_name=args.host, server_port=args.port, max_file_size=f"{args.max_upload_mb}mb",
                ssr_mode=False, prevent_thread_lock=not block)
    return page


@console_command
def main(argv: list[str] | None = None):
    args = parser().parse_args(argv)
    if args.write_space:
        from sapiens2_ft.app.space import write_space

        out = write_space(Path(args.write_space), args.model, argv or [])
        print(f"Space written to {out}: run it with `cd {out} && python app.py`, or upload it as a Gradio Space "
              f"(`hf upload USER/SPACE {out} --repo-type space`)")
        return out
    return start(args)
