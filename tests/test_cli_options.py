"""Every option of every command is passed somewhere in the tests: an option no test passes is an option nothing
checks, read but not used as easily as used. The options are each ``add_argument("--name", ...)`` of the package
(predict, export, evaluate, convert, app, detect, memory, check_data, write_shards, the training command's own; the
config keys ``--data.*``, ``--model.*`` ... are the recipes' and the config reference's, docs/configs.md). An option
counts as passed when a test file names it (``--name``, or ``--no-name`` of a yes/no option), in whichever tier."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Options no test passes, and why (keep this short: a new option gets a test instead).
EXEMPT = {
    "--table": "memory: estimates nine models (0.4b to 5b, three ways each), about a minute of CPU; "
               "docs/scaling.md's table is its output",
    "--tf32": "train: TF32 is a CUDA setting; set_tf32 is tested (test_tf32_is_set_on_gpus_only), a CPU run cannot "
              "tell its value",
}


def defined_options() -> dict[str, tuple[list[str], str]]:
    """Each option of the package's commands -> (the spellings that pass it, the file that defines it)."""
    options = {}
    for path in sorted((ROOT / "sapiens2_ft").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                flags, keywords = node.args, {k.arg: k.value for k in node.keywords}
            elif isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[0], ast.Tuple) \
                    and isinstance(node.elts[1], ast.Dict):  # an OPTIONS entry: (flags, add_argument's keywords)
                flags = node.elts[0].elts
                keywords = {k.value: v for k, v in zip(node.elts[1].keys, node.elts[1].values)
                            if isinstance(k, ast.Constant)}
            else:
                continue
            names = [a.value for a in flags if isinstance(a, ast.Constant) and str(a.value).startswith("--")
                     and "." not in a.value]  # --data.KEY: the recipes' keys, shown in a short --help
            yes_no = "action" in keywords and ast.unparse(keywords["action"]).endswith("BooleanOptionalAction")
            for name in names:
                spellings = [name, f"--no-{name[2:]}"] if yes_no else [name]
                options[name] = (spellings, str(path.relative_to(ROOT)))
    return options


def test_every_option_is_passed_in_a_test():
    options = defined_options()
    assert len(options) > 50 and {"--model", "--smooth_maps", "--shard_mb", "--max_frames"} <= set(options)
    text = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py") if p.name != Path(__file__).name)
    never = {name: where for name, (spellings, where) in options.items()
             if not any(re.search(re.escape(s) + r"(?![\w.-])", text) for s in spellings)}
    unexplained = {name: where for name, where in never.items() if name not in EXEMPT}
    assert not unexplained, f"options no test passes (pass each in a test of what it does): {unexplained}"
    stale = sorted(set(EXEMPT) - set(never))
    assert not stale, f"exempt but passed in a test now, or gone: remove {stale} from EXEMPT"
