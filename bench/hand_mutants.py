"""Hand-written mutants: the slips a developer would make in a feature (an option read but not used, a cache key
missing a field, a path keyed by the wrong thing), each with the fast tests that must fail on it.

Each entry replaces ``old`` (found exactly once in ``file``, else the table is out of date: an error, never a skip)
by ``new``. ``python bench/mutants.py --hand`` runs them (docs/mutation.md has the table and the results);
``tests/test_hand_mutants.py`` checks in the fast tier that every ``old`` is still there and every test exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HandMutant:
    name: str
    file: str  # relative to the checkout, under sapiens2_ft/ or datamodules/
    old: str  # found exactly once in the file
    new: str
    why: str  # the slip, and what a user would see
    tests: tuple[str, ...]  # fast tests (node ids) that fail on it


class TableError(ValueError):
    """An entry of the table no longer matches the code."""


def mutated(root: Path, mutant: HandMutant) -> str:
    """The text of ``mutant.file`` under ``root`` with the mutation made; TableError when ``old`` is not found
    exactly once."""
    source = (root / mutant.file).read_text()
    count = source.count(mutant.old)
    if count != 1:
        raise TableError(f"{mutant.name}: the old text is found {count} times in {mutant.file} (needs exactly 1): "
                         f"update the entry in bench/hand_mutants.py")
    return source.replace(mutant.old, mutant.new)


SMOOTHING, SMOOTHING_TESTS = "sapiens2_ft/predict/smoothing.py", "tests/apps/test_predict_smoothing.py"
INVARIANCE = "tests/apps/test_predict_invariance.py"
ALBEDO = "tests/tasks/albedo/test_albedo_colour.py"
CARD = "tests/training/test_model_card.py"
CACHE = "tests/data/test_index_cache.py"
APP = "tests/apps/test_app.py::test_limits_and_server_options_reach_the_demo_and_the_server"
BOX_OPTIONS = "tests/apps/test_detect.py::test_every_box_option_reaches_its_box_source"
RESUMED_START = ("tests/training/test_validate_first.py::"
                 "test_a_resumed_run_keeps_its_start_and_does_not_validate_it_again")
BOUNDARY, UNTRUSTED = "tests/data/test_boundary.py", "tests/apps/test_untrusted_inputs.py"
BUDGET, CONVERT_LINKS = "tests/apps/test_convert_budget.py", "tests/apps/test_convert_boundary.py"
API, RESULT = "tests/apps/test_api.py", "tests/apps/test_result.py"
SERVE_MODELS, SERVE_REQUESTS = "tests/apps/test_serve_models.py", "tests/apps/test_serve_requests.py"
SERVED = "sapiens2_ft/serve/models.py"
PLY, POINT_CLOUD = "sapiens2_ft/tasks/pointmap/inference.py", "tests/tasks/pointmap/test_point_clouds.py"
PLY_PEOPLE = f"{POINT_CLOUD}::test_the_ply_holds_the_metric_points_of_the_people_in_rgb"
PLY_SHEET = "tests/apps/test_predict_sheet.py::test_several_models_write_per_task_folders_and_a_sheet"
PLY_APP = "tests/apps/test_app_point_cloud.py::test_the_page_offers_the_people_s_point_cloud"
CLASS_SETS, SET_TRAINING = "tests/data/test_class_sets.py", "tests/tasks/seg/test_class_set_training.py"
DISTILL, DISTILL_TESTS = "sapiens2_ft/tasks/distill.py", "tests/tasks/test_distill.py"

HAND: tuple[HandMutant, ...] = (
    # -- the five of issue 59 ------------------------------------------------------------------------------------
    HandMutant(
        "smoothing-by-list-place", SMOOTHING,
        old='        for person in people:\n            o = self.options\n'
            '            track = self.filters.setdefault(person["track_id"],',
        new='        for place, person in enumerate(people):\n            o = self.options\n'
            '            track = self.filters.setdefault(place,',
        why="video smoothing keyed by the person's place in the list: people listed in another order are blended",
        tests=(f"{SMOOTHING_TESTS}::test_a_track_is_smoothed_by_its_id_whatever_its_place_in_the_list",)),
    HandMutant(
        "d_cutoff-ignored", SMOOTHING,
        old="smoothing_factor(dt, self.d_cutoff)", new="smoothing_factor(dt, self.min_cutoff)",
        why="the speed filter uses min_cutoff: d_cutoff does nothing (the defaults set the two equal)",
        tests=(f"{SMOOTHING_TESTS}::test_d_cutoff_low_passes_the_speed_apart_from_min_cutoff",)),
    HandMutant(
        "albedo-read-as-bgr", "sapiens2_ft/tasks/albedo/targets.py",
        old="return cv2.cvtColor(image, cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0",
        new="return image.astype(np.float32) / 255.0",
        why="albedo files read in OpenCV's BGR order: loss, PSNR and pictures agree with themselves, red is blue",
        tests=(f"{ALBEDO}::test_a_red_albedo_is_red_in_the_batches_and_scores_red_as_right",)),
    HandMutant(
        "card-metrics-of-any-step", "sapiens2_ft/training/model_card.py",
        old='if validation.get("step") == info.global_step and validation.get("metrics"):',
        new='if validation.get("metrics"):',
        why="the card takes the checkpoint's latest validation whatever its step: last.ckpt or a preemption "
            "checkpoint publishes another step's metrics as the weights'",
        tests=("tests/training/test_resume.py::test_an_export_of_last_between_validations_carries_that_steps_metrics",
               f"{CARD}::test_a_checkpoint_is_given_the_metrics_of_its_own_step_only")),
    HandMutant(
        "chunks-share-first-boxes", "sapiens2_ft/api.py",
        old="boxes[start:start + len(images)]", new="boxes[:len(images)]",
        why="Predictor.predict gives every later chunk the first chunk's boxes (more images than batch_size)",
        tests=(f"{INVARIANCE}::test_each_image_keeps_its_own_boxes_over_several_chunks",)),
    # -- the sweep of last round's code ----------------------------------------------------------------------------
    HandMutant(
        "stream-chunks-share-first-boxes", "sapiens2_ft/api.py",
        old="self._box_source(boxes, index)", new="self._box_source(boxes, 0)",
        why="Predictor.stream crops every chunk of frames at the first chunk's boxes",
        tests=(f"{INVARIANCE}::test_each_image_keeps_its_own_boxes_over_several_chunks",)),
    HandMutant(
        "smoother-drops-d_cutoff", SMOOTHING,
        old="OneEuroFilter(o.min_cutoff, o.beta, o.d_cutoff)", new="OneEuroFilter(o.min_cutoff, o.beta)",
        why="an option read but not passed on: SmoothOptions.d_cutoff never reaches the filters",
        tests=(f"{SMOOTHING_TESTS}::test_d_cutoff_low_passes_the_speed_apart_from_min_cutoff",)),
    HandMutant(
        "stream-map-blend-ignored", "sapiens2_ft/api.py",
        old="smooth_maps = map_blends([model], options)", new="smooth_maps = None",
        why="Predictor.stream(smooth=SmoothOptions(map_weight=...)) leaves the dense maps unblended",
        tests=(f"{SMOOTHING_TESTS}::test_stream_blends_dense_maps",)),
    HandMutant(
        "predict-fps-ignored", "sapiens2_ft/predict/cli.py",
        old="frames = Frames(Path(args.input), args.fps) if video else None",
        new="frames = Frames(Path(args.input)) if video else None",
        why="predict --fps not passed on: a folder of frames plays (and is smoothed) at 30 frames/s",
        tests=(f"{SMOOTHING_TESTS}::test_predict_smooth_filters_the_keypoints_of_a_still_noisy_clip",)),
    HandMutant(
        "albedo-npy-in-bgr", "sapiens2_ft/tasks/albedo/inference.py",
        old='albedo.permute(1, 2, 0).numpy().astype("float16")',
        new='albedo[[2, 1, 0]].permute(1, 2, 0).numpy().astype("float16")',
        why="predict's NAME.npy in the picture's BGR order (the PNG's order copied to the array)",
        tests=(f"{ALBEDO}::test_a_model_predicting_red_has_predict_write_red",)),
    HandMutant(
        "card-final-metrics-for-any-step", "sapiens2_ft/training/model_card.py",
        old='if summary.get("global_step") == info.global_step and summary.get("metrics"):',
        new='if summary.get("metrics"):',
        why="a checkpoint with no validation of its own step gets the run's final metrics",
        tests=(f"{CARD}::test_a_checkpoint_is_given_the_metrics_of_its_own_step_only",)),
    HandMutant(
        "evaluate-detected-boxes-replace-card", "sapiens2_ft/evaluate.py",
        old='boxes = "detected boxes" if args.boxes or args.detector else None', new="boxes = None",
        why="evaluate --boxes on an export replaces the card's results on the annotations' boxes with the "
            "lower ones of detected boxes",
        tests=(f"{CARD}::test_evaluate_on_detected_boxes_adds_its_results_beside_the_ground_truth_boxes",)),
    HandMutant(
        "cache-key-without-on_bad_sample", "datamodules/coco_index.py",
        old='"on_bad_sample": self.on_bad_sample, "crop"', new='"crop"',
        why="an index cached under on_bad_sample: skip is read back by a run that refuses bad records: no error",
        tests=(f"{CACHE}::test_an_index_built_skipping_a_bad_record_does_not_hide_it_from_a_run_that_refuses_them",)),
    HandMutant(
        "cache-key-without-crop", "datamodules/coco_index.py",
        old='"crop": list(self.crop), ', new="",
        why="another input size (W/H) reads the index checked with the old crop (keypoint coverage)",
        tests=(f"{CACHE}::test_a_changed_key_rebuilds_the_index[input_size]",)),
    HandMutant(
        "cache-key-without-images", "datamodules/coco_index.py",
        old='"images": str(self.images_dir.resolve()), ', new="",
        why="the same json over another image folder reads the index that checked the first folder's files",
        tests=(f"{CACHE}::test_a_changed_key_rebuilds_the_index[images]",)),
    HandMutant(
        "validate-first-after-resume", "sapiens2_ft/training/callbacks/validate_first.py",
        old="if trainer.global_step == 0 and trainer.enable_validation:", new="if trainer.enable_validation:",
        why="validate_first validates again at every resume (a checked step validated twice, minutes on a big set)",
        tests=(RESUMED_START,)),
    HandMutant(
        "start-metrics-not-resumed", "sapiens2_ft/training/callbacks/run_artifacts.py",
        old='"drawn": dict(self.drawn),\n                "start_metrics": dict(self.start_metrics)}',
        new='"drawn": dict(self.drawn)}',
        why="a resumed run's summary loses where fine-tuning started (start_metrics not in the checkpoint)",
        tests=(RESUMED_START,)),
    HandMutant(
        "app-max-frames-ignored", "sapiens2_ft/app/cli.py",
        old="Limits(args.max_megapixels, args.max_frames)", new="Limits(args.max_megapixels)",
        why="app --max_frames not passed on: the demo runs 300 frames of every video",
        tests=(APP,)),
    HandMutant(
        "app-upload-limit-ignored", "sapiens2_ft/app/cli.py",
        old='max_file_size=f"{args.max_upload_mb}mb"', new='max_file_size="200mb"',
        why="app --max_upload_mb not passed on: the server takes 200 MB uploads whatever it is told",
        tests=(APP,)),
    HandMutant(
        "predict-max-pixels-ignored", "sapiens2_ft/predict/cli.py",
        old="args.workers, args.max_pixels)", new="args.workers)",
        why="predict --max_pixels not passed on: images above it are decoded and predicted",
        tests=("tests/data/test_image_limits.py::test_predict_max_pixels_is_the_limit_an_image_is_skipped_above",)),
    HandMutant(
        "detector-nms-ignored", "sapiens2_ft/predict/boxes.py",
        old="PersonDetector(args.detector, args.det_threshold, args.nms_iou, args.device)",
        new="PersonDetector(args.detector, args.det_threshold, device=args.device)",
        why="predict --nms_iou not passed on: the detector suppresses at 0.6 whatever it is told",
        tests=(BOX_OPTIONS,)),
    HandMutant(
        "seg-box-options-ignored", "sapiens2_ft/predict/boxes.py",
        old="args.seg_split_heads, args.seg_head_area)", new=")",
        why="predict --no-seg_split_heads and --seg_head_area not passed on: regions are split by heads anyway",
        tests=(BOX_OPTIONS,)),
    HandMutant(
        "shard-mb-ignored", "sapiens2_ft/write_shards.py",
        old='cli_value(cli, cli.config, "shard_mb")', new="1024.0",
        why="write_shards --shard_mb not passed on: shards of 1 GiB whatever the download size asked",
        tests=("tests/training/test_resume_shards.py::test_write_shards_cuts_shards_by_size_and_by_count",)),
    HandMutant(
        "shards-mix-repeat-lost", "datamodules/shards/writer.py",
        old='"name": p.name, "repeat": p.repeat}', new='"name": p.name, "repeat": 1.0}',
        why="a data.train mix written as shards trains every dataset once an epoch (its repeats lost)",
        tests=("tests/data/test_shards.py::test_a_mix_keeps_its_parts_and_repeats",)),
    HandMutant(
        "convert-split-ignored", "sapiens2_ft/convert/__main__.py",
        old="split=args.split,", new="split=None,",
        why="convert --split not passed on: every image goes to train",
        tests=("tests/apps/test_convert.py::test_the_command_line_gives_convert_its_class_set_and_split",)),
    # -- issue 58: the boundary ------------------------------------------------------------------------------------
    HandMutant(
        "write-through-a-linked-folder", "datamodules/boundary/writes.py",
        old="    if link is not None and link != folder / name:",
        new="    if False:",
        why="a write into a folder whose subfolder is a link: the file lands wherever the link leads",
        tests=(f"{BOUNDARY}::test_a_write_replaces_a_link_and_never_writes_through_it",)),
    HandMutant(
        "write-in-place", "datamodules/boundary/writes.py",
        old='    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix or ".tmp")\n'
            '    os.close(fd)\n',
        new="    temporary = str(path)\n",
        why="writing by the final name: a link named like the output is written through (~/.bashrc replaced)",
        tests=(f"{BOUNDARY}::test_a_write_replaces_a_link_and_never_writes_through_it",
               f"{UNTRUSTED}::test_export_onnx_replaces_links_named_like_its_outputs_and_never_writes_through_them")),
    HandMutant(
        "tiff-last-tag-wins", "datamodules/boundary/images.py",
        old="if tag in (256, 257) and kind in (3, 4) and tag not in found:",
        new="if tag in (256, 257) and kind in (3, 4):",
        why="the TIFF header read as no decoder reads it: a second 10x10 entry hides 12000 x 12000",
        tests=(f"{BOUNDARY}::test_a_tiff_read_as_the_decoder_reads_it",)),
    HandMutant(
        "opencv-cap-not-set", "datamodules/boundary/limits.py",
        old="    os.environ.setdefault(OPENCV_ENV, str(limit))",
        new="    pass",
        why="OpenCV keeps its own 2^30-pixel limit: a header that lies is decoded in full",
        tests=(f"{BOUNDARY}::test_opencv_refuses_a_lying_header_before_allocating",)),
    HandMutant(
        "schemes-denylist", "datamodules/boundary/urls.py",
        old="    if scheme not in REMOTE_SCHEMES:",
        new='    if scheme in ("ftp", "ssh"):',
        why="a deny list instead of the allow list: pipe: runs its shell command",
        tests=(f"{UNTRUSTED}::test_a_recipe_whose_shard_url_is_a_command_runs_nothing",
               f"{BOUNDARY}::test_only_the_listed_url_schemes_are_read")),
    HandMutant(
        "fifo-opened", "datamodules/boundary/files.py",
        old="    if not stat.S_ISREG(mode):\n        os.close(fd)",
        new="    if stat.S_ISDIR(mode):\n        os.close(fd)",
        why="only folders refused: a FIFO blocks the reader, /dev/zero streams without end",
        tests=(f"{BOUNDARY}::test_a_fifo_or_a_device_is_refused_without_blocking",)),
    HandMutant(
        "cache-mode-unchecked", "datamodules/boundary/cache.py",
        old='f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})" if info.st_mode & 0o022 else None)',
        new="None)",
        why="a cache folder others can write to is used: they plant a lock, a partial file or a link in it",
        tests=(f"{BOUNDARY}::test_the_cache_is_the_user_s_own_and_private",
               "tests/data/test_shards.py::test_the_download_cache_is_private_and_its_entries_are_checked_as_fresh_data")),
    HandMutant(
        "npy-header-trusted", "datamodules/boundary/arrays.py",
        old="    if declared != size - stream.tell():",
        new="    if declared < size - stream.tell():",
        why="an .npy declaring more than it holds is allocated by its header (40 GB from 100 bytes)",
        tests=(f"{BOUNDARY}::test_an_array_whose_header_lies_is_refused_before_it_is_allocated",)),
    HandMutant(
        "export-links-followed", "sapiens2_ft/training/export_dir.py",
        old="        if wanted(name) or any(n.startswith(name + \"/\") for n in recorded or []):",
        new="        if False:",
        why="a handed export's link to ~/.cache/huggingface/token is copied into a Space and uploaded",
        tests=(f"{UNTRUSTED}::test_a_linked_secret_is_neither_copied_into_a_space_nor_uploaded",)),
    HandMutant(
        "keypoint-set-outside", "datamodules/keypoints/metainfo.py",
        old="    path = inside(folder, folder / spec, follow_links=True) if folder is not None else None",
        new="    path = folder / spec if folder is not None else Path(spec)",
        why="a handed export's keypoints.yaml extends ../../anything: any YAML of the machine is read",
        tests=(f"{UNTRUSTED}::test_a_handed_export_s_keypoint_set_cannot_read_outside_its_folder",)),
    HandMutant(
        "card-keeps-credentials", "sapiens2_ft/training/public_text.py",
        old="    text = URL.sub(lambda m: m.group(1) + m.group(3), text)",
        new="    text = URL.sub(lambda m: m.group(0), text)",
        why="the pushed card keeps user:password@ and ?X-Amz-Signature= of a URL in the recipe",
        tests=(f"{UNTRUSTED}::test_the_pushed_card_names_nothing_of_the_machine",)),
    HandMutant(
        "upload-limit-in-pixels", "sapiens2_ft/app/service.py",
        old="        check_pixels((width, height), path.name, limits.max_pixels)",
        new="        check_pixels((width, height), path.name, limits.max_pixels * 10**6)",
        why="the app's upload limit compared in the wrong unit: a 144-megapixel bomb passes its header check",
        tests=("tests/apps/test_app.py::test_a_bomb_upload_is_refused_from_its_header_and_the_queue_goes_on",)),
    # -- issue 58: convert's budget, encoded masks and links ------------------------------------------------------
    HandMutant(
        "xml-mask-area-summed", "sapiens2_ft/convert/cvat.py",
        old='cost["mask_pixels"] += int(max(0.0, size[0]) * max(0.0, size[1]))',
        new='cost["mask_pixels"] += int(max(0.0, size[0]) + max(0.0, size[1]))',
        why="a mask's area counted as width + height: a 30 kB XML of huge masks passes the budget (1.6 GiB)",
        tests=(f"{BUDGET}::test_a_small_xml_declaring_huge_masks_is_refused_before_decoding",)),
    HandMutant(
        "mask-pixel-rate-loose", "sapiens2_ft/convert/budget.py",
        old='MASK_PIXELS_PER_BYTE * self.totals["bytes"]',
        new='MASK_PIXELS_PER_BYTE * 100 * self.totals["bytes"]',
        why="the mask-pixel budget a hundred times looser: the amplification case is decoded",
        tests=(f"{BUDGET}::test_a_small_xml_declaring_huge_masks_is_refused_before_decoding",)),
    HandMutant(
        "convert-out-links-ignored", "sapiens2_ft/convert/output.py",
        old="    links = [link for name in outputs if (link := link_on_the_way(out, name)) is not None]",
        new="    links = []",
        why="a link planted in --out named like an output: --overwrite replaces what it leads to",
        tests=(f"{CONVERT_LINKS}::test_a_link_in_out_named_like_an_output_is_not_written_through",)),
    HandMutant(
        "export-links-read", "sapiens2_ft/convert/records.py",
        old="    kept = [f for f in files if inside(src, f, follow_links=True)]",
        new="    kept = [f for f in files if inside(src, f, follow_links=False)]",
        why="an export's annotations.xml that is a link to a file of the user's is read (and shown in errors)",
        tests=(f"{CONVERT_LINKS}::test_annotation_files_linked_from_outside_the_export_are_not_read",)),
    HandMutant(
        "xml-entities-parsed", "sapiens2_ft/convert/cvat.py",
        old='    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:',
        new="    if False:",
        why="an XML declaring entities is parsed: they can expand without end",
        tests=(f"{CONVERT_LINKS}::test_an_xml_that_declares_entities_is_refused_unparsed",)),
    # -- issue 60: a new user's first day ----------------------------------------------------------------------
    HandMutant(
        "resume-auto-takes-the-latest", "sapiens2_ft/training/run_dir.py",
        old="        if not named and job is None:",
        new="        if False:",
        why="--resume auto off a cluster silently takes the newest run and rewrites it",
        tests=("tests/training/test_finished_runs.py::test_resume_auto_outside_a_job_changes_nothing_in_a_finished_run",)),
    HandMutant(
        "finished-run-resumed", "sapiens2_ft/training/cli.py",
        old="            if (Path(run_dir) / SUMMARY_FILE).exists() and reached_end(",
        new="            if False and reached_end(",
        why="a run that reached its end is resumed and its files rewritten",
        tests=("tests/training/test_finished_runs.py::test_resuming_a_finished_run_is_a_message_and_changes_nothing",)),
    HandMutant(
        "segments-forgotten", "sapiens2_ft/training/callbacks/run_artifacts.py",
        old='            **({"segments": self.earlier} if self.earlier else {}),\n',
        new="",
        why="a resumed run's summary drops what the earlier segment recorded",
        tests=("tests/training/test_finished_runs.py::test_a_run_resumed_to_train_further_keeps_the_earlier_segment",)),
    HandMutant(
        "resume-overwrites-config", "sapiens2_ft/training/cli.py",
        old='"config_filename": segment_file(CONFIG_FILE, self.segment)}',
        new='"config_filename": CONFIG_FILE}',
        why="a resumed run writes its recipe over the first segment's config.yaml",
        tests=("tests/training/test_finished_runs.py::test_a_run_resumed_to_train_further_keeps_the_earlier_segment",)),
    HandMutant(
        "hint-drops-private", "sapiens2_ft/training/hub.py",
        old='(" --private" if private else "")',
        new='""',
        why="the recovery hint of a refused private push would create a public repository",
        tests=("tests/training/test_hub.py::test_the_upload_hint_of_a_refused_push_keeps_the_user_s_choices",)),
    HandMutant(
        "read-only-token-passes", "sapiens2_ft/training/hub.py",
        old='    if role == "read":',
        new='    if role == "none":',
        why="a read-only token is found out only after training, when the upload fails",
        tests=("tests/training/test_hub.py::test_the_hub_is_asked_before_training",)),
    HandMutant(
        "foreign-namespace-passes", "sapiens2_ft/training/hub.py",
        old="    if namespace not in mine:",
        new="    if False:",
        why="a repository in someone else's namespace is found out only after training",
        tests=("tests/training/test_hub.py::test_the_hub_is_asked_before_training",)),
    HandMutant(
        "mse-scores-unclipped", "sapiens2_ft/tasks/pose/codec.py",
        old="        return flat.gather(1, index[:, None])[:, 0].clamp(0.0, 1.0).reshape(lead)",
        new="        return flat.gather(1, index[:, None])[:, 0].reshape(lead)",
        why="an MSE head's keypoint scores are raw heatmap peaks (5.7-10), not in [0, 1]",
        tests=("tests/tasks/pose/test_ce_scores.py::test_mse_scores_are_heatmap_peaks_within_0_and_1",)),
    HandMutant(
        "export-sigma-ignored", "sapiens2_ft/tasks/pose/inference.py",
        old="        sigma = read_json(processor).get(SIGMA_KEY) if processor.is_file() else None",
        new="        sigma = None",
        why="predict scores a model with another window than its validation did (the export's sigma unread)",
        tests=("tests/apps/test_keypoint_scores.py::test_the_same_scores_through_predict_the_api_the_app_and_onnx",)),
    HandMutant(
        "pretrained-fetched-late", "sapiens2_ft/training/cli.py",
        old='        fetch_pretrained(config.model.get("pretrained"), config.get("init_from"))\n',
        new="",
        why="offline, a recipe on a hub model prints tracebacks and leaves a half run folder",
        tests=("tests/training/test_cli.py::test_a_model_the_machine_cannot_fetch_is_one_message_before_any_work",)),
    HandMutant(
        "every-repo-gated", "sapiens2_ft/models/factory.py",
        old='f"`hf auth login`." if repo_id.startswith(GATED) else "")',
        new='f"`hf auth login`." if True else "")',
        why="the open RT-DETR detector is called gated when it cannot be fetched",
        tests=("tests/apps/test_released_models.py::test_without_a_detector_the_message_names_the_other_box_sources",)),
    HandMutant(
        "small-train-set-trains-nothing", "datamodules/loaders.py",
        old="        if len(sampler) < batch_size:  # every batch partial, hence dropped: the fit would end at step 0",
        new="        if False:",
        why="fewer samples than a batch: the fit ends at step 0 and writes a finished run",
        tests=("tests/training/test_cli.py::test_a_training_set_smaller_than_a_batch_is_a_message",)),
    HandMutant(
        "report-printed-twice", "sapiens2_ft/check_data.py",
        old='        warnings.filterwarnings("ignore", message="the data check found problems")\n',
        new="",
        why="check_data --show prints the data check's report twice",
        tests=("tests/data/test_data_check.py::test_check_data_prints_its_report_once",)),
    # -- issue 61: errors at the edge, one Result type ----------------------------------------------------------
    HandMutant(
        "api-boxes-unchecked", "sapiens2_ft/predict/boxes.py",
        old="            problem = box_problem(row[:4].tolist(), float(row[4]) if len(row) == 5 else 1.0)\n",
        new="            problem = None\n",
        why="the API's box arrays skip the boxes file's rule: NaN and zero-size boxes give NaN keypoints, no error",
        tests=(f"{API}::test_a_bad_box_is_an_error_naming_it_as_a_boxes_file_s_would_be",)),
    HandMutant(
        "zero-size-box-passes", "sapiens2_ft/predict/boxes.py",
        old="    if bbox[2] <= 0 or bbox[3] <= 0 or max(abs(v) for v in bbox) > MAX_COORDINATE:",
        new="    if bbox[2] < 0 or bbox[3] < 0 or max(abs(v) for v in bbox) > MAX_COORDINATE:",
        why="a box of zero width or height is cropped (a divide by zero, NaN keypoints) in the API and predict",
        tests=(f"{API}::test_a_bad_box_is_an_error_naming_it_as_a_boxes_file_s_would_be",
               "tests/apps/test_bad_arguments.py::test_bad_boxes_are_named_before_anything_runs")),
    HandMutant(
        "exit-status-lost", "sapiens2_ft/exits.py",
        old="    return SystemExit(str(err) if err.exit_code == 1 else err.exit_code)",
        new="    return SystemExit(str(err))",
        why="a preempted run exits with status 1: the scheduler does not rerun it (preemption.exit_code lost)",
        tests=("tests/test_exits.py::test_an_error_becomes_its_message_and_exit_status",)),
    HandMutant(
        "stream-people-untracked", "sapiens2_ft/api.py",
        old="                people(list(result.people))  # track ids and smoothed keypoints, in place\n",
        new="",
        why="Predictor.stream's people get no track ids and smooth=True filters nothing",
        tests=(f"{RESULT}::test_a_streamed_result_carries_its_frame_and_its_people_s_track_ids",
               f"{SMOOTHING_TESTS}::test_a_track_is_smoothed_by_its_id_whatever_its_place_in_the_list")),
    HandMutant(
        "result-saves-another-image-id", "sapiens2_ft/predict/result.py",
        old="        writer.add(key, 1, self.image, self.output)",
        new="        writer.add(key, 0, self.image, self.output)",
        why="Result.save's keypoints.json and images.json are not predict's (image id 0, not 1)",
        tests=(f"{RESULT}::test_save_writes_what_predict_writes_for_pose",)),
    HandMutant(
        "bf16-on-the-cpu", "sapiens2_ft/predict/options.py",
        old='precision == "auto" and torch.device(device).type == "cuda" and backend == "torch"',
        new='precision == "auto" and backend == "torch"',
        why="precision auto runs bf16 autocast on the CPU too (slower there, and other numbers than fp32)",
        tests=(f"{API}::test_bf16_autocast_is_one_rule_for_predict_the_api_and_the_app",)),
    HandMutant(
        "api-maps-dropped", "sapiens2_ft/api.py",
        old="                    maps=True)]",
        new="                    maps=False)]",
        why="Predictor.predict's dense results come without their maps",
        tests=(f"{RESULT}::test_a_dense_result_has_maps_at_the_image_s_size_and_saves_predict_s_files",
               f"{API}::test_load_a_checkpoint_and_predict_a_dense_task")),
    # -- issue 63: the server ------------------------------------------------------------------------------------
    HandMutant(
        "serve-request-boxes-ignored", SERVED,
        old="            elif given is not None:\n                boxes[k] = given\n",
        new="            elif False:\n                boxes[k] = given\n",
        why="a request's person boxes are dropped for the server's source: the answer is of other people",
        tests=(f"{SERVE_MODELS}::test_the_answer_is_the_json_of_the_python_api_s_result",)),
    HandMutant(
        "serve-keypoint-set-ignored", SERVED,
        old="        return sets[request.keypoints] if request.keypoints is not None else first(sets)",
        new="        return first(sets)",
        why="a request naming a keypoint set gets the first set served (17 keypoints where it asked for 308)",
        tests=(f"{SERVE_MODELS}::test_the_answer_is_the_json_of_the_python_api_s_result",)),
    HandMutant(
        "serve-batch-grouped-by-task", SERVED,
        old="groups.setdefault((item.task, item.keypoints, item.focal), [])",
        new="groups.setdefault((item.task,), [])",
        why="a batch runs every pose request with the keypoint set of its first: answers depend on the neighbours",
        tests=(f"{SERVE_MODELS}::test_a_batch_answers_what_each_request_alone_answers",)),
    HandMutant(
        "serve-failed-batch-fails-all", SERVED,
        old="                        answers[k] = self.answer([items[k]])[0]",
        new='                        raise RuntimeError("the batch failed")',
        why="one request the model fails on takes the good requests of its batch down with it (500s)",
        tests=(f"{SERVE_MODELS}::test_a_request_the_model_fails_on_is_answered_alone",)),
    HandMutant(
        "serve-refusal-raised", "sapiens2_ft/serve/server.py",
        old="        except RequestError as err:\n            return err",
        new="        except RequestError as err:\n            raise err",
        why="a bad request raises in decode_request: LitServe fails its whole batch with that answer",
        tests=(f"{SERVE_MODELS}::test_the_lit_api_answers_a_refusal_with_its_status_and_message",)),
    HandMutant(
        "serve-queue-bound-off-by-one", "sapiens2_ft/serve/server.py",
        old="            full = self.held.value >= self.max_queue",
        new="            full = self.held.value > self.max_queue",
        why="a server holding --max_queue requests takes one more: the bound is not the one documented",
        tests=(f"{SERVE_REQUESTS}::test_a_full_server_answers_503_at_once_without_reading_the_body",)),
    HandMutant(
        "serve-streamed-bytes-uncounted", "sapiens2_ft/serve/server.py",
        old="            if size > self.max_bytes:",
        new="            if False:",
        why="a body sent without Content-Length (chunked) is read whole, whatever its size",
        tests=(f"{SERVE_REQUESTS}::test_the_gate_refuses_bodies_litserve_would_answer_with_a_500",)),
    HandMutant(
        "serve-megapixels-in-mebi", "sapiens2_ft/serve/cli.py",
        old="int(args.max_megapixels * 1e6)",
        new="int(args.max_megapixels * 2**20)",
        why="--max_megapixels read in the byte limit's unit: 5% more pixels pass than documented",
        tests=(f"{SERVE_MODELS}::test_every_serve_option_reaches_the_server_it_builds",)),
    # -- issue 62: the labelling loop ------------------------------------------------------------------------------
    HandMutant(
        "outline-holes-dropped", "sapiens2_ft/labelling/outlines.py",
        old="    return [o for o, inside in zip(found, enclosed) if inside or o.class_id != background]",
        new="    return [o for o in found if o.class_id != background]",
        why="the background inside a person (between an arm and the body) is painted as the part around it",
        tests=("tests/apps/test_labelling.py::test_outlines_paint_class_maps_back_exactly",
               "tests/apps/test_labelling.py::test_seg_round_trip_gives_the_same_class_maps")),
    HandMutant(
        "outlines-smallest-first", "sapiens2_ft/labelling/outlines.py",
        old="    found.sort(key=lambda o: -o.covers)",
        new="    found.sort(key=lambda o: o.covers)",
        why="a part inside another is painted first and covered: the tool shows the torso without its hands",
        tests=("tests/apps/test_labelling.py::test_outlines_paint_class_maps_back_exactly",)),
    HandMutant(
        "label-studio-y-of-width", "sapiens2_ft/labelling/label_studio.py",
        old='                                   {"x": _percent(px, width), "y": _percent(py, height),',
        new='                                   {"x": _percent(px, width), "y": _percent(py, width),',
        why="keypoints' y in percent of the width: on any photo not square they sit too high or too low",
        tests=("tests/apps/test_labelling.py::test_pose_round_trip_gives_the_same_keypoints",)),
    HandMutant(
        "cvat-min-score-ignored", "sapiens2_ft/labelling/cvat.py",
        old='outside="0" if s >= self.min_score else "1"',
        new='outside="0"',
        why="predict --format cvat --min_score keeps every keypoint, however unsure",
        tests=("tests/apps/test_labelling.py::test_keypoints_below_min_score_come_back_unlabelled",)),
    HandMutant(
        "coco-rle-row-major", "sapiens2_ft/labelling/coco.py",
        old='    flat = np.asarray(mask, bool).reshape(-1, order="F")',
        new="    flat = np.asarray(mask, bool).reshape(-1)",
        why="COCO RLE counted along rows: every mask a tool reads is the transposed scramble of the part",
        tests=("tests/apps/test_labelling.py::test_rle_counts_and_voc_colours",
               "tests/apps/test_labelling.py::test_seg_round_trip_gives_the_same_class_maps")),
    HandMutant(
        "links-out-copied", "sapiens2_ft/labelling/formats.py",
        old="    kept = {key: path for key, path in images.items() if inside(root, path, follow_links=True)}",
        new="    kept = {key: path for key, path in images.items() if inside(root, path)}",
        why="a link in a handed photo folder copies a file from elsewhere into the tool's import",
        tests=("tests/apps/test_labelling.py::test_a_link_leading_out_of_input_is_not_copied_into_the_tool",)),
    HandMutant(
        "flip-answer-not-swapped", "sapiens2_ft/labelling/predictions.py",
        old='            points = q["points"][flip].copy()',
        new='            points = q["points"].copy()',
        why="select compares the mirrored crop's left wrist with the right one: every person looks unsure",
        tests=("tests/apps/test_select.py::test_a_self_consistent_pose_model_is_judged_by_its_scores_alone",)),
    HandMutant(
        "mirror-box-off-by-one", "sapiens2_ft/labelling/predictions.py",
        old="    out[:, 0] = width - 1 - out[:, 0] - out[:, 2]",
        new="    out[:, 0] = width - out[:, 0] - out[:, 2]",
        why="the mirrored crop is a pixel off the mirror of the crop: a disagreement the model never made",
        tests=("tests/apps/test_select.py::test_mirrored_boxes_and_flip_agreement",)),
    HandMutant(
        "margin-over-the-background", "sapiens2_ft/labelling/predictions.py",
        old="    weight = (1 - probabilities[0].float()).clamp_min(0)",
        new="    weight = torch.ones_like(probabilities[0].float())",
        why="seg's unsureness averaged over the whole image: empty photos and backgrounds outrank the people",
        tests=("tests/apps/test_select.py::test_a_class_model_is_unsure_where_two_classes_are_close_on_the_people",)),
    HandMutant(
        "diversity-ignored", "sapiens2_ft/labelling/selection.py",
        old="    if diversity == 0 or features is None:",
        new="    if True:",
        why="select --diversity picks the same near-duplicates as without it",
        tests=("tests/apps/test_select.py::test_choose_takes_the_most_unsure_and_spreads_with_diversity",)),
    # -- issue 64: point clouds -----------------------------------------------------------------------------------
    HandMutant(
        "ply-axes-reversed", PLY,
        old="    return np.frombuffer(ply_bytes(xyz[kept], image[kept], comments), np.uint8)",
        new="    return np.frombuffer(ply_bytes(xyz[kept][:, ::-1], image[kept], comments), np.uint8)",
        why="the .ply holds Z, Y, X: the person lies on its side in a viewer, the header's K fits no point",
        tests=(PLY_PEOPLE, PLY_SHEET, PLY_APP)),
    HandMutant(
        "ply-in-millimetres", PLY,
        old="    return np.frombuffer(ply_bytes(xyz[kept], image[kept], comments), np.uint8)",
        new="    return np.frombuffer(ply_bytes(xyz[kept] * 1000, image[kept], comments), np.uint8)",
        why="the .ply is in millimetres while its header and the .npy say metres: a 1.7 m person is 1.7 km tall",
        tests=(PLY_PEOPLE, PLY_SHEET, PLY_APP)),
    HandMutant(
        "ply-mask-inverted", PLY,
        old="        kept &= mask\n",
        new="        kept &= ~mask\n",
        why="the .ply holds the background the seg or matting model found, not the people",
        tests=(PLY_PEOPLE, PLY_SHEET, PLY_APP)),
    HandMutant(
        "ply-colours-bgr", PLY,
        old="    return np.frombuffer(ply_bytes(xyz[kept], image[kept], comments), np.uint8)",
        new="    return np.frombuffer(ply_bytes(xyz[kept], image[kept][:, ::-1], comments), np.uint8)",
        why="the point cloud's colours are BGR: skin is blue in every viewer",
        tests=(PLY_PEOPLE, PLY_SHEET, PLY_APP)),
    HandMutant(
        "ply-focal-of-the-network-input", PLY,
        old="        return np.array([[focal / float(matrix[0, 0]), 0.0, (shape[1] - 1) / 2],",
        new="        return np.array([[focal, 0.0, (shape[1] - 1) / 2],",
        why="the header's and NAME_intrinsics.txt's fx is the focal at the network's input, not the image's",
        tests=(f"{POINT_CLOUD}::test_the_header_the_txt_and_the_json_give_the_focal_that_made_the_points_metric",
               PLY_SHEET)),
    HandMutant(
        "demo-offers-no-ply", "sapiens2_ft/app/service.py",
        old="            files = {suffix: result.files[suffix] for suffix in result.inference.downloads}",
        new="            files = {}",
        why="the web demo's download box stays empty with a pointmap model loaded",
        tests=(PLY_APP,)),
    # -- issue 64: class sets of segmentation ----------------------------------------------------------------------
    HandMutant(
        "merge-row-without-log-k", "sapiens2_ft/models/factory.py",
        old="    return weight[index].mean(0), bias[index].mean(0) + math.log(len(rows))",
        new="    return weight[index].mean(0), bias[index].mean(0)",
        why="a merged class starts k times less likely than its sources together, even where their logits agree",
        tests=(f"{SET_TRAINING}::test_rows_by_name_a_merge_from_its_sources_and_a_new_class_fresh",
               f"{SET_TRAINING}::test_a_merge_starts_with_the_sum_of_its_sources_probabilities_where_their_logits_agree")),
    HandMutant(
        "labels-not-mapped-onto-the-set", "datamodules/dense_dataset.py",
        old="        data = relabel(load_sample(sample, self.spec, self.label_count), self.spec, self.class_table)",
        new="        data = load_sample(sample, self.spec, self.label_count)",
        why="the label files' ids of the 29 train the set's rows: Torso's pixels teach the class that has id 22",
        tests=(f"{SET_TRAINING}::test_a_set_with_a_merge_and_a_new_class_trains_a_few_steps",)),
    HandMutant(
        "classes-txt-not-read", "datamodules/dense_datamodule.py",
        old='        if spec is None and root is not None and (Path(root) / "classes.txt").is_file():',
        new='        if spec is None and root is None:',
        why="a converted dataset's labels are read as the set's ids: a mismatch goes unseen, a merge is out of range",
        tests=(f"{SET_TRAINING}::test_labels_the_set_lacks_are_an_error_listing_both_sets",
               f"{SET_TRAINING}::test_a_set_with_a_merge_and_a_new_class_trains_a_few_steps")),
    HandMutant(
        "unlabelled-set-class-accepted", "datamodules/classes/class_set.py",
        old="        if unknown or never:",
        new="        if unknown:",
        why="a class of the set that no label file gives trains as absent and scores nothing, without a word",
        tests=(f"{CLASS_SETS}::test_a_name_mismatch_lists_both_sets",)),
    HandMutant(
        "extends-follows-a-link-out", "datamodules/classes/class_set.py",
        old="    path = inside(folder, folder / spec, follow_links=True) if Path(source).is_file() else None",
        new="    path = inside(folder, folder / spec) if Path(source).is_file() else None",
        why="a class set extends whatever file a link beside it leads to (outside the folder it was handed in)",
        tests=(f"{CLASS_SETS}::test_extends_may_not_lead_out_of_its_folder_by_path_or_link",)),
    HandMutant(
        "convert-ignores-merge-sources", "sapiens2_ft/convert/names.py",
        old="        return NameMap(classes.names, rename, classes.sources, spec)",
        new="        return NameMap(classes.names, rename, (), spec)",
        why="convert --classes coarse leaves the tool's torso, face and clothing labels out (255) instead of merging",
        tests=("tests/apps/test_convert.py::test_a_class_set_takes_the_tool_labels_of_its_merges_sources_by_name",)),
    # -- issue 65: distillation ------------------------------------------------------------------------------
    HandMutant(
        "teacher-in-train-mode", DISTILL,
        old="        self.model.eval()  # whatever a trainer did to the modules it knows\n",
        new="        self.model.train()\n",
        why="the teacher runs in train mode (dropout, RoPE rescale of a pretraining config): noisy targets",
        tests=(f"{DISTILL_TESTS}::test_the_teacher_rows_are_the_students_keypoints_by_name_and_it_stays_frozen",)),
    HandMutant(
        "temperature-not-squared", DISTILL,
        old="    return kl.mean() * t * t\n",
        new="    return kl.mean()\n",
        why="the KL term's gradients shrink as 1/T^2: at T=4 the teacher barely counts",
        tests=(f"{DISTILL_TESTS}::test_the_kl_term_keeps_its_gradient_scale_across_temperatures",)),
    HandMutant(
        "teacher-rows-not-by-name", DISTILL,
        old="inference_class.options_from_model(directory, config, labels)",
        new="inference_class.options_from_model(directory, config, None)",
        why="the teacher runs with its own rows (308), not the student's keypoints by name: wrong or failing targets",
        tests=(f"{DISTILL_TESTS}::test_the_teacher_rows_are_the_students_keypoints_by_name_and_it_stays_frozen",
               f"{DISTILL_TESTS}::test_a_teacher_without_the_students_keypoints_is_a_clear_error")),
    HandMutant(
        "distill-mask-ignored", DISTILL,
        old="        if diff.ndim == 4 and mask is not None:\n",
        new="        if False:\n",
        why="normals, pointmaps, mattes: the student copies the teacher's background too",
        tests=(f"{DISTILL_TESTS}::test_the_geometric_term_counts_the_mask_only",)),
    HandMutant(
        "teacher-never-bf16", DISTILL,
        old="        self.bf16 = bf16_supported(device, self.cpuinfo)\n",
        new="        self.bf16 = False\n",
        why="a 5B teacher runs in float32 on a bf16 GPU: twice its memory, several times its time",
        tests=(f"{DISTILL_TESTS}::test_the_teacher_runs_in_bf16_where_the_cpu_has_it",)),
    HandMutant(
        "shuffled-teacher-passes", "sapiens2_ft/tasks/base.py",
        old="        term = self.distill_loss({k: v[first:] for k, v in student.items()}, teacher, mask)\n",
        new="        term = self.distill_loss({k: v[first:].roll(1, 0) for k, v in student.items()}, teacher, mask)\n",
        why="each image is matched with another image's teacher outputs: the student learns the teacher's average",
        tests=(f"{DISTILL_TESTS}::test_without_labels_the_student_moves_toward_the_teacher_and_a_shuffled_teacher_"
               "does_not",)),
    HandMutant(
        "pseudo-people-unfiltered", "sapiens2_ft/pseudo_labels.py",
        old="                          if p[\"score\"] >= args.min_score]",
        new="                          if p[\"score\"] >= 0]",
        why="pseudo-labels keep every person the model guessed, however unsure",
        tests=("tests/apps/test_pseudo_labels.py::test_pose_pseudo_labels_keep_the_sure_people_and_keypoints_and_"
               "train_as_coco",)),
    HandMutant(
        "pseudo-pixels-unfiltered", "sapiens2_ft/pseudo_labels.py",
        old="    labels = np.where(confidence.numpy() >= min_score, labels.numpy(), -1)",
        new="    labels = labels.numpy()",
        why="seg pseudo-labels train on every pixel's guess, none ignored",
        tests=("tests/apps/test_pseudo_labels.py::test_seg_pseudo_labels_ignore_the_unsure_pixels_and_train_as_"
               "label_maps",)),
)
