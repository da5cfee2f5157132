"""The web demo's page (Gradio): a photo, a webcam frame or a video in; ``predict``'s pictures and the JSON of what
the models found out. Gradio's queue runs the models one request at a time in its worker threads, off the page's
event loop; a refused input (not an image, too large, an unreadable video) is a message in the page. An uploaded
photo's size is read from its header before anything decodes it (Gradio converts none: ``image_mode=None``), so a
decompression bomb is refused in milliseconds and holds up no one in the queue."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no calls home from a demo (set before gradio loads)

import gradio as gr  # noqa: E402
from PIL import Image, UnidentifiedImageError  # noqa: E402

from datamodules.boundary.files import read_text  # noqa: E402
from datamodules.boundary.folders import handed_file  # noqa: E402
from datamodules.errors import DataError  # noqa: E402
from sapiens2_ft.app.service import Demo, DemoError, Limits, check_photo  # noqa: E402

MODELS = "models"  # the concurrency group of every event that runs the models


def refusing_unreadable(image: gr.Image, limits: Limits) -> gr.Image:
    """``image`` (``type="filepath"``) refusing, with a message naming it, a file that is not an image of a kind the
    demo reads or is larger than ``limits`` (from its header, before Gradio opens it), where ``gr.Image`` would end
    in a bare error. Wrapped on the instance: a subclass of a Gradio component makes Gradio write a ``.pyi`` stub
    beside this file."""
    preprocess = image.preprocess

    def checked(payload):
        path = getattr(payload, "path", None)  # an upload (a data: URL is written to a file, checked by the demo)
        if path and not str(getattr(payload, "url", None) or "").startswith("data:"):
            try:
                check_photo(Path(path), limits)
            except DemoError as err:
                raise refusal(str(err).replace(Path(path).name, uploaded_name(payload), 1)) from None
        try:
            return preprocess(payload)
        except Image.DecompressionBombError:
            raise refusal(f"{uploaded_name(payload)}: too many pixels for this demo; send a smaller picture") from None
        except (UnidentifiedImageError, OSError, ValueError) as err:
            raise refusal(f"{uploaded_name(payload)}: not an image this demo can read ({type(err).__name__})") from None

    image.preprocess = checked
    return image


def refusal(message: str) -> gr.Error:
    """A visitor's bad input: a message in the page (no traceback in the server's log)."""
    return gr.Error(message, print_exception=False)


def uploaded_name(payload) -> str:
    return getattr(payload, "orig_name", None) or Path(getattr(payload, "path", None) or "the file").name


def model_title(name: str) -> str:
    """A model's name for the page: its model card's title (an export's ``README.md``), else as given."""
    try:
        card = read_text(handed_file(Path(name), "README.md"))
    except (OSError, DataError):  # no card (a hub id), or one that is a link
        return name
    return next((line[2:].strip() for line in card.splitlines() if line.startswith("# ")), None) or name


def describe(demo: Demo, names: list[str]) -> str:
    """The page's heading: the models, their labels, and where pose's people come from."""
    lines = ["# Sapiens2 demo", ""]
    for name, m in zip(names, demo.models):
        labels = m.inference.labels
        lines.append(f"- **{m.task}**: `{model_title(name)}` ({len(labels)} {'labels' if labels else 'outputs'})")
    lines += ["", f"Person boxes for pose: {demo.boxes}. Fine-tuned with sapiens2-ft."]
    return "\n".join(lines)


def build_page(demo: Demo, names: list[str], scratch: Path | None = None) -> gr.Blocks:
    """The page around ``demo``; its API endpoints are ``/photo`` (image file -> gallery, JSON, and the files to
    download where a model offers some: a pointmap model's ``.ply``) and ``/video``."""
    scratch = Path(scratch or tempfile.mkdtemp(prefix="sapiens2-ft-app-"))

    def on_photo(path):
        if not path:
            raise refusal("give a photo first (upload, webcam or paste)")
        try:
            if demo.downloads:
                pictures, found, files = demo.photo_and_files(path, Path(tempfile.mkdtemp(dir=scratch)))
                return pictures, found, [str(f) for f in files]
            return demo.photo(path)
        except DemoError as err:
            raise refusal(str(err)) from None

    def on_video(path):
        if not path:
            raise refusal("give a video first (upload or webcam)")
        try:
            clip, found = demo.video(path, Path(tempfile.mkdtemp(dir=scratch)))
        except DemoError as err:
            raise refusal(str(err)) from None
        return str(clip), found

    with gr.Blocks(title="Sapiens2 demo") as page:
        gr.Markdown(describe(demo, names))
        with gr.Tab("Photo"):
            with gr.Row():
                photo = refusing_unreadable(gr.Image(sources=["upload", "webcam", "clipboard"], type="filepath",
                                                     image_mode=None, label="photo or webcam frame"), demo.limits)
                pictures = gr.Gallery(label="predictions", columns=2, height=520, object_fit="contain", format="png")
            run_photo = gr.Button("Run", variant="primary")
            found = gr.JSON(label="found")
            outputs = [pictures, found]
            if demo.downloads:  # a pointmap model: its point cloud
                outputs.append(gr.File(label=f"download ({', '.join(demo.downloads)})", file_count="multiple"))
            run_photo.click(on_photo, photo, outputs, api_name="photo", concurrency_id=MODELS, concurrency_limit=1)
        with gr.Tab("Video"):
            with gr.Row():
                video = gr.Video(sources=["upload", "webcam"], label="video")
                clip = gr.Video(label="predictions")
            run_video = gr.Button("Run", variant="primary")
            frames = gr.JSON(label="per frame")
            run_video.click(on_video, video, [clip, frames], api_name="video", concurrency_id=MODELS,
                            concurrency_limit=1)
    return page.queue(max_size=32, default_concurrency_limit=1)
