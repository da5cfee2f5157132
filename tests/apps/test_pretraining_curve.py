"""tools/pretraining_curve.py: a run's validations join the demo backbone's learning-curve CSV, and the plot draws."""

from __future__ import annotations

import csv
import shutil

import cv2

from tool_scripts import load_tool


def test_a_runs_validations_are_appended_at_their_total_steps_and_drawn(tmp_path):
    tool = load_tool("pretraining_curve")
    table = tmp_path / "curve.csv"
    shutil.copy(tool.CSV, table)
    before = tool.read_rows(table)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with (run_dir / "metrics.csv").open("w", newline="") as f:  # as Lightning's CSVLogger writes it
        writer = csv.writer(f)
        writer.writerow(["epoch", "step", "train/loss", "val/loss", "val/pose_AP", "val/seg_mIoU", "val/matting_mse"])
        writer.writerow([0, 199, 12.5, "", "", "", ""])
        writer.writerow([0, 399, "", 11.0, 0.06, 0.20, 0.033])
        writer.writerow([0, 799, "", 10.5, 0.08, 0.22, 0.028])
        writer.writerow([0, 1000, "", 10.4, 0.09, 0.23, 0.027])  # after the last step of a 1000-step budget
    (run_dir / "summary.json").write_text('{"global_step": 1000}')
    tool.append(run_dir, "9", "a test run", 5100, 1234.0, path=table)
    rows = tool.read_rows(table)
    assert rows[:len(before)] == before
    added = rows[len(before):]
    assert [(r["run"], r["total_steps"], r["run_steps"]) for r in added] == [
        ("9", "5500", "400"), ("9", "5900", "800"), ("9", "6100", "1000")]
    assert [r["pose_AP"] for r in added] == ["0.06", "0.08", "0.09"] and added[2]["wall_s"] == "1234"
    assert not added[0]["wall_s"]
    assert added[0]["pose_AR"] == ""  # not logged: left blank, not drawn
    picture = cv2.imread(str(tool.draw(rows, tmp_path / "curve.png")))
    assert picture is not None and picture.shape[0] > 400 and picture.std() > 10
