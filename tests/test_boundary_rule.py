"""The rule of ``datamodules/boundary``: no module outside it opens, decodes, copies, fetches or writes a file by
itself. A new ``open(...)``, ``.read_text()``, ``cv2.imread`` or ``shutil.copy`` anywhere else fails here until it
goes through the boundary, or is listed in :data:`ALLOWED` with the reason it needs none."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("datamodules", "sapiens2_ft")
BOUNDARY = "datamodules/boundary/"

NAMES = {"open", "gopen", "urlopen", "safe_open", "copyfile", "copytree", "mkstemp", "imread", "imdecode", "imwrite"}
METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "open", "imread", "imdecode", "imwrite",
           "VideoCapture", "VideoWriter", "urlopen", "save_pretrained", "savefig", "symlink_to", "hardlink_to",
           "NamedTemporaryFile", "mkstemp", "rename", "ZipFile", "loadtxt", "savez", "savez_compressed", "fromfile",
           "tofile"}
QUALIFIED = {("np", "load"), ("np", "save"), ("torch", "load"), ("torch", "save"), ("json", "load"),
             ("json", "dump"), ("os", "open"), ("os", "replace"), ("os", "rename"), ("os", "symlink"),
             ("shutil", "copy"), ("shutil", "copy2"), ("shutil", "copyfile"), ("shutil", "copytree"),
             ("shutil", "move"), ("pickle", "load"), ("yaml", "load")}

# module -> {call: why it needs no boundary}. Keep it short: each entry is a place the boundary cannot reach.
ALLOWED = {
    "sapiens2_ft/compat.py": {".open": "Lightning's CSV logger's own file system object, in the run directory"},
    "sapiens2_ft/models/checkpoints.py": {"torch.load": "weights_only=True (tensors and plain data), memory-mapped; "
                                                        "the checkpoint guard of docs/reliability.md"},
    "sapiens2_ft/models/dcp_metadata.py": {"torch.load": "weights_only=True on bytes read through the boundary"},
    "sapiens2_ft/models/pretraining_heads.py": {"safe_open": "safetensors: a header of tensor shapes, no code, "
                                                             "read lazily by tensor"},
    "sapiens2_ft/training/checkpoint_io.py": {
        "open": "the run's own checkpoint, written to a temporary name, flushed and renamed (its own atomic writer)",
        "os.open": "fsync of the run's checkpoint folder", "os.replace": "the atomic rename of its checkpoints",
        "torch.save": "the run's own checkpoint, into the temporary file above"},
    "sapiens2_ft/models/cpu_bf16.py": {".read_text": "/proc/cpuinfo, the machine's, not a user's file"},
    "sapiens2_ft/training/run_facts.py": {".read_text": "/proc/cpuinfo, the machine's, not a user's file"},
    "sapiens2_ft/training/hf_export.py": {".save_pretrained": "into a new private folder of boundary.writes.staged"},
    "sapiens2_ft/training/results_page.py": {".savefig": "into the temporary path of boundary.writes.replacing"},
    "sapiens2_ft/predict/video.py": {".VideoWriter": "into the temporary path of boundary.writes.replacing"},
    "sapiens2_ft/app/service.py": {".VideoWriter": "into the temporary path of boundary.writes.replacing"},
    "datamodules/index_cache.py": {".savez": "into the temporary path of boundary.writes.replacing"},
    "datamodules/shards/writer.py": {".savez": "into the temporary path of boundary.writes.replacing",
                                     ".open": "tarfile.open of the shards this writer has just written"},
    "sapiens2_ft/tasks/pointmap/targets.py": {".loadtxt": "parses text read by boundary.files.read_text"},
    "datamodules/synthetic/generate.py": {".rename": "moves its own new staging folder into place (no file is "
                                                     "written through a link)"},
    "datamodules/synthetic/in_use.py": {"os.open": "its lock file beside the dataset, opened with O_NOFOLLOW"},
}


def calls(path: Path) -> list[tuple[str, int]]:
    """(call, line) of every file-touching call of the module at ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in NAMES:
            found.append((func.id, node.lineno))
        elif isinstance(func, ast.Attribute):
            base = func.value.id if isinstance(func.value, ast.Name) else None
            if (base, func.attr) in QUALIFIED:
                found.append((f"{base}.{func.attr}", node.lineno))
            elif func.attr in METHODS:
                found.append((f".{func.attr}", node.lineno))
    return found


def modules() -> dict[str, Path]:
    return {p.relative_to(REPO).as_posix(): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}


def test_only_the_boundary_touches_files():
    unlisted = [f"{name}:{line}: {call}" for name, path in modules().items() if not name.startswith(BOUNDARY)
                for call, line in calls(path) if call not in ALLOWED.get(name, {})]
    assert not unlisted, ("read, decode, copy, fetch or write through datamodules/boundary (or list the call in "
                          "ALLOWED with its reason):\n" + "\n".join(unlisted))


def test_every_allowed_call_is_still_there():
    """An exception that no longer applies is removed, so the list stays the list of real exceptions."""
    present = {name: {call for call, _ in calls(path)} for name, path in modules().items()}
    stale = [f"{name}: {call}" for name, allowed in ALLOWED.items() for call in allowed
             if call not in present.get(name, set())]
    assert not stale, "no longer in the code, remove from ALLOWED:\n" + "\n".join(stale)


def test_the_scan_sees_each_kind_of_call(tmp_path):
    """The checks above would pass on a scan that finds nothing: it finds each kind it looks for."""
    probe = tmp_path / "probe.py"
    probe.write_text("import cv2, json, shutil\nopen('x')\nPath('x').read_text()\ncv2.imread('x')\n"
                     "shutil.copy('a', 'b')\njson.dump({}, f)\nx.write_bytes(b'')\n")
    assert [call for call, _ in calls(probe)] == ["open", ".read_text", ".imread", "shutil.copy", "json.dump",
                                                  ".write_bytes"]
    boundary = [call for name, path in modules().items() if name.startswith(BOUNDARY) for call, _ in calls(path)]
    assert "os.open" in boundary and ".write_bytes" in boundary  # the boundary itself is where files are touched
