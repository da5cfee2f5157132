"""``sapiens2-ft serve --model EXPORT [--model EXPORT ...]``: an HTTP service of fine-tuned models on LitServe (the
``serve`` extra: ``pip install 'sapiens2-ft[serve]'``; docs/deploy.md).

``POST /predict`` takes one image (a multipart upload, or base64 in JSON; never a path or a URL) and its options (the
task, pose's boxes and keypoint set, a pointmap's focal, the files to answer) and answers the JSON of what ``predict``
and the Python API give for that image (``predict/result_json.py``); ``GET /health`` says when the workers are ready,
``/docs`` is the OpenAPI page. Requests are batched as they come (``--max_batch_size``, ``--batch_timeout``), run by
``--workers_per_device`` workers per device, each holding the models. Every limit is checked before the work:
request bytes, pixels (from the image's header, before it is decoded), boxes per image, the requests held at once
(one more: 503 at once) and the time a request may wait (504).
"""

from __future__ import annotations

import argparse
import signal
import tempfile
from pathlib import Path

from datamodules.errors import BadInput, NotFound, Sapiens2FTError
from sapiens2_ft.predict.boxes import add_box_arguments, box_argument_problems
from sapiens2_ft.predict.loading import model_problem, resolve_model
from sapiens2_ft.exits import console_command
from sapiens2_ft.problems import Problems, raise_problems
from sapiens2_ft.serve.models import ModelOptions
from sapiens2_ft.serve.requests import ServeLimits

HOSTS = ("127.0.0.1", "0.0.0.0", "::")  # what LitServe binds
BACKENDS = ("torch", "onnxruntime")
PRECISIONS = ("auto", "fp32", "bf16")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sapiens2-ft serve", description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--model", required=True, action="append",
                   help="exported dir, hub id or checkpoint, as for predict; repeat it for several tasks")
    p.add_argument("--keypoints", action="append", default=[],
                   help="pose: a keypoint set to serve (built-in name or YAML), as predict's; repeat it for several "
                        "(each loads the model once more); a request picks one by name, the first by default")
    p.add_argument("--backend", choices=BACKENDS, default="torch",
                   help="torch, or onnxruntime: the networks run as the export's model.onnx (docs/deploy.md)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="auto (bf16 autocast on a GPU with torch, else fp32), fp32 or bf16")
    p.add_argument("--host", default="127.0.0.1", choices=HOSTS,
                   help="address to serve on: 127.0.0.1 (this machine only), 0.0.0.0 or :: (the network)")
    p.add_argument("--port", type=int, default=8000, help="port to serve on (1024-65535)")
    p.add_argument("--accelerator", default="auto", choices=("auto", "cpu", "cuda", "mps"),
                   help="where the workers run (auto: a GPU when there is one)")
    p.add_argument("--devices", default="auto", help="GPUs to use: a count, or auto (all)")
    p.add_argument("--workers_per_device", type=int, default=1,
                   help="worker processes per device, each holding the models")
    p.add_argument("--max_batch_size", type=int, default=4, help="requests run together in one batch at most")
    p.add_argument("--batch_timeout", type=float, default=0.01,
                   help="seconds a worker waits for a batch to fill before it runs what it has")
    p.add_argument("--batch_size", type=int, default=8, help="pose: person crops per forward pass")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds a request may wait for a worker; past it the answer is 504")
    p.add_argument("--max_queue", type=int, default=64,
                   help="requests the server holds at once (waiting or running); one more is answered 503 at once")
    p.add_argument("--max_request_mb", type=float, default=ServeLimits.max_bytes / 2**20,
                   help="refuse request bodies larger than this (MiB; 413)")
    p.add_argument("--max_megapixels", type=float, default=ServeLimits.max_pixels / 1e6,
                   help="refuse images larger than this (width x height / 1e6, read from the header before "
                        "decoding; 413)")
    p.add_argument("--max_boxes", type=int, default=ServeLimits.max_boxes, help="pose: person boxes per image (422)")
    add_box_arguments(p)
    return p


def argument_problems(args) -> list[str]:
    """Every problem of the arguments seen before a model is loaded, each naming its argument."""
    problems = Problems(filter(None, [model_problem(m) for m in args.model]))
    problems += box_argument_problems(args)
    problems.check(1024 <= args.port <= 65535, f"--port: 1024 to 65535, got {args.port}")
    problems.check(args.devices == "auto" or args.devices.isdigit() and int(args.devices) >= 1,
                   f"--devices: a count of at least 1, or auto, got {args.devices}")
    for name, least in (("workers_per_device", 1), ("max_batch_size", 1), ("batch_size", 1), ("max_queue", 1),
                        ("max_boxes", 1)):
        problems.check(getattr(args, name) >= least, f"--{name}: at least {least}, got {getattr(args, name)}")
    for name in ("timeout", "max_request_mb", "max_megapixels"):
        problems.check(getattr(args, name) > 0, f"--{name}: must be > 0, got {getattr(args, name)}")
    problems.check(0 <= args.batch_timeout < args.timeout,
                   f"--batch_timeout: from 0 to below --timeout ({args.timeout}), got {args.batch_timeout}")
    problems.check(not (args.detector and args.boxes_from_seg), "give one of --detector and --boxes_from_seg")
    return problems


def prepared_model(model: str, scratch: Path, backend: str) -> str:
    """``model`` as a local exported directory, made once before the workers start: a checkpoint exported (with its
    ONNX graph for onnxruntime), a hub id fetched; an export without the ONNX graph onnxruntime needs is refused."""
    from sapiens2_ft.models.checkpoints import is_distributed_checkpoint
    from sapiens2_ft.models.onnx import ONNX_FILE

    path = Path(model)
    if path.is_file() or is_distributed_checkpoint(path):
        from sapiens2_ft.training.hf_export import export_checkpoint  # the training stack: checkpoints only

        try:
            directory = export_checkpoint(path, scratch / f"model{len(list(scratch.glob('model*')))}")
        except ValueError as err:
            raise BadInput(f"--model: {err}") from None
        if backend == "onnxruntime":
            from sapiens2_ft.training.onnx_export import write_onnx

            write_onnx(directory)
        print(f"exported checkpoint {model} -> {directory}")
        return str(directory)
    directory = resolve_model(model)
    if backend == "onnxruntime" and not (directory / ONNX_FILE).is_file():
        raise NotFound(f"--backend onnxruntime: {directory} has no {ONNX_FILE}; add it with "
                         f"`sapiens2-ft export --checkpoint {directory} --format onnx`")
    return str(directory)


def model_task(name: str, directory: str) -> str:
    """The task of the exported model in ``directory`` (from its config, before the workers load its weights);
    BadInput naming ``--model name`` for a directory of no task this installation serves."""
    from transformers import Sapiens2Config

    from sapiens2_ft.tasks.registry import task_of_config
    from sapiens2_ft.tasks.saved_model import SavedModelError, inference_class_of

    try:
        config = Sapiens2Config.from_pretrained(directory, trust_remote_code=False)
        inference_class_of(config)  # a task this installation serves
        return task_of_config(config)
    except SavedModelError as err:
        raise BadInput(f"--model: {name} holds {err}") from None


def options_of(args, scratch: Path) -> tuple:
    """(ModelOptions, ServeLimits, ServerOptions) of the arguments, the models prepared (``prepared_model``)."""
    from sapiens2_ft.serve.server import ServerOptions, cpu_threads

    raise_problems(argument_problems(args))
    boxes = {k: getattr(args, k) for k in ("detector", "det_threshold", "nms_iou", "boxes_from_seg", "seg_min_area",
                                           "seg_box_pad", "seg_split_heads", "seg_head_area")}
    models = [prepared_model(m, scratch, args.backend) for m in args.model]
    tasks = [model_task(name, model) for name, model in zip(args.model, models)]
    twice = sorted({task for task in tasks if tasks.count(task) > 1})
    raise_problems([f"--model: two {task} models; give one model per task" for task in twice])
    if args.boxes_from_seg in args.model:  # a seg model also served: prepared and loaded once
        boxes["boxes_from_seg"] = models[args.model.index(args.boxes_from_seg)]
    elif args.boxes_from_seg:
        boxes["boxes_from_seg"] = prepared_model(args.boxes_from_seg, scratch, "torch")
    devices = args.devices if args.devices == "auto" else int(args.devices)
    cpu = args.accelerator == "cpu" or (args.accelerator == "auto" and not _has_gpu())
    model_options = ModelOptions(models, list(args.keypoints), args.backend, args.precision, args.batch_size, boxes,
                                 cpu_threads(args.workers_per_device) if cpu else 0)
    limits = ServeLimits(int(args.max_request_mb * 2**20), int(args.max_megapixels * 1e6), args.max_boxes)
    server = ServerOptions(args.accelerator, devices, args.workers_per_device, args.max_batch_size,
                           args.batch_timeout, args.timeout, args.max_queue)
    return model_options, limits, server


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available() or torch.backends.mps.is_available()


@console_command
def main(argv: list[str] | None = None):
    args = parser().parse_args(argv)
    try:
        from sapiens2_ft.serve.server import build_server
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in ("litserve", "fastapi", "starlette"):
            raise NotFound("sapiens2-ft serve needs LitServe: pip install 'sapiens2-ft[serve]'") from None
        raise
    scratch = Path(tempfile.mkdtemp(prefix="sapiens2-ft-serve-"))
    server = build_server(*options_of(args, scratch))
    print(f"serve: POST http://{args.host}:{args.port}/predict, GET /health, the OpenAPI page /docs", flush=True)
    signal.signal(signal.SIGTERM, stop)  # docker stop, kill, Kubernetes: LitServe's own shutdown, as for Ctrl+C
    try:
        server.run(host=args.host, port=args.port, generate_client_file=False)
    except RuntimeError as err:  # a worker could not start (its error is printed above)
        raise Sapiens2FTError(f"sapiens2-ft serve: {err}") from None
    return 0


def stop(signum, frame):
    """SIGTERM as Ctrl+C: LitServe stops its API servers and workers (without it they would outlive the command)."""
    raise KeyboardInterrupt
