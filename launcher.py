"""SEAL-repro launcher: compose a run's config, start the environment service, run the job.

    .venv/bin/python launcher.py [--conf exp/cpu_default.yaml] [--with-bfcl] [-- key=value ...]
    .venv/bin/python launcher.py --resume outputs/NAME [-- key=value ...]   # continue a run
    .venv/bin/python launcher.py --explain [--conf X.yaml]   # every config key, its value and meaning
    .venv/bin/python launcher.py --conf exp/SEAL.yaml --preflight   # a training run's checks only

Config: exp/NAME.yaml over seal/launch/run_config.py's defaults, then overrides. The run
directory is locked and checked, its service started with a fresh token: docs/runs.md.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import traceback
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from seal import commands
from seal.launch.config_docs import closest_keys, render
from seal.launch.jobs import JOBS, check_job, job_function  # noqa: F401 (JOBS: tests add jobs)
from seal.launch.resume import (
    ACCEPT_FLAG,
    check_resume,
    check_service,
    recorded_config,
    service_baseline,
)
from seal.launch.run_config import RunConfig, check_run_name
from seal.launch.service import service_for_run, token_in_environment
from seal.launch.terminate import TERMINATED_STATUS, Terminated, sigterm_raises
from seal.renamed_keys import rename_old_keys
from seal.report.summary import render_markdown, summarize
from seal.runs.export import export_hint
from seal.runs.records import read_val_dir
from seal.runs.redact import REDACTED, redact_argv
from seal.runs.run import Run, open_run
from seal.runs.run_dir_checks import unfinished_attempt
from seal.runs.run_record import start_attempt
from seal.trainer.model_files import refuse_missing_model
from seal.trainer.preflight_rows import PreflightFailed
from seal.trainer.verl.cpu import PLATFORM_ENV as CPU_PLATFORM_ENV
from seal.trainer_config import TRAINING_JOBS

REPO_ROOT = Path(__file__).resolve().parent
DEFAULT_CONF = REPO_ROOT / "exp/cpu_default.yaml"


class UnknownConfigKey(KeyError):
    """A key no config section has; the message names the closest valid ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def _unknown_key(error: ConfigKeyError, conf: Path | None, overrides: list[str]) -> str:
    prefix = str(error.full_key or error.key)
    given = next(
        (o.split("=", 1)[0] for o in overrides if o.split("=", 1)[0].startswith(prefix)), None
    )
    key, where = (given, "the command line") if given else (prefix, str(conf or "the config"))
    near = closest_keys(key, RunConfig)
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    return (
        f"unknown config key {key!r} (in {where}){hint} "
        f"(`{commands.launcher('--explain')}` lists every key)"
    )


def compose(conf: Path | None, overrides: list[str], base=None):
    """The run config: the documented defaults, then `base` (a run's recorded config, for
    a resume), the file `conf`, then the `key=value` overrides."""
    given = []
    if base is not None:
        given.append(base)
    if conf is not None:
        if not conf.exists():
            raise FileNotFoundError(f"config file {conf} does not exist")
        given.append(OmegaConf.load(conf))
    given.append(OmegaConf.from_dotlist(overrides))
    # Renamed keys' old spellings (a run recorded before a rename, an old file) read as new.
    layers = [OmegaConf.structured(RunConfig), *map(rename_old_keys, given)]
    try:
        cfg = OmegaConf.merge(*layers)
    except ConfigKeyError as error:
        raise UnknownConfigKey(_unknown_key(error, conf, overrides)) from None
    except ValidationError as error:
        key = str(error.full_key)
        if key == "name":
            check_run_name(None)  # `name=` reads as null: say what a name must be
        if f"{key}=" in overrides:
            raise ValueError(
                f"config key {key!r} was given no value (`{key}=`): give one"
            ) from None
        raise
    check_run_name(cfg.name)
    check_job(cfg.job)
    return cfg


def load_recorded(path: Path):
    """A run's recorded config as a layer to compose on: its redacted token removed (the
    token comes from the environment or a fresh one, as at the start)."""
    recorded = OmegaConf.load(path)
    if OmegaConf.select(recorded, "service.token") == REDACTED:
        recorded.service.token = ""
    return recorded


def configure(args: argparse.Namespace):
    """(the run config, the run's recorded config or None, its path): from `--resume
    RUN_DIR` (the recorded config, the overrides on top) or from `--conf` and the
    overrides; a resume of a recorded run is checked against it once the run is locked."""
    if args.resume:
        run_dir = Path(args.resume)
        path = recorded_config(run_dir)
        if path is None:
            raise FileNotFoundError(
                f"--resume {run_dir}: no recorded config there ({run_dir / 'config.yaml'}); "
                "check the path, or resume with --conf and trainer.checkpoint.resume=true"
            )
        where = [f"output_dir={run_dir.parent}", f"name={run_dir.name}"]
        resume = ["trainer.checkpoint.resume=true"]
        cfg = compose(None, [*where, *args.overrides, *resume], base=load_recorded(path))
        return cfg
    return compose(args.conf or DEFAULT_CONF, args.overrides)


def attempt_record(
    args: argparse.Namespace, cfg, accepted: list, service=None, service_changed=()
) -> dict:
    """What the launcher knows of the attempt (seal/runs/run_record.py adds the code and
    the environment): the command as given (the token masked), the seeds every sampling
    uses, and the run's `service` (a RunningService) with what changed in it since the
    last attempt (`service_changed`)."""
    secrets = [cfg.service.token, service.token if service else None]
    t = cfg.trainer
    seeds = {"trainer.rollout.seed": t.rollout.seed, "trainer.data.seed": t.data.seed}
    if t.model.path in ("tiny-qwen2", "tiny-qwen3.5"):
        seeds["trainer.model.tiny.seed"] = t.model.tiny.seed
    if cfg.job == "replay":
        seeds = {"replay.seed": cfg.replay.seed}
    resumed = cfg.job in TRAINING_JOBS and t.checkpoint.resume
    return {
        "command": {
            "argv": redact_argv(args.argv, secrets),
            "conf": None if args.resume else str(args.conf or DEFAULT_CONF),
            "resume": args.resume and str(args.resume),
            "overrides": redact_argv(args.overrides, secrets),
        },
        "accepted_changes": [str(change) for change in accepted],
        "service": service
        and {
            "url": service.url,
            "adopted": service.pid is None,
            "settings": service.settings,
        },
        "service_changes": [str(change) for change in service_changed],
        "seeds": seeds,
        "sampling": (
            "a resumed attempt continues the random state its checkpoint saved"
            if resumed
            else "seeded with trainer.rollout.seed before the first rollout"
        ),
    }


def save_run_files(cfg, run: Run, record: dict) -> None:
    saved = copy.deepcopy(cfg)
    if saved.service.token:
        saved.service.token = REDACTED  # the token never goes to disk in clear
    text = OmegaConf.to_yaml(saved, resolve=True)
    run.attempt = start_attempt(run.dir, text, record, REPO_ROOT)
    if cfg.job in TRAINING_JOBS:
        run.record_data_order(cfg.trainer)


def _check_resume_config(args, cfg, run_dir: Path, backend: str, accepted: list):
    """Refuse a resume that changes the experiment (seal/launch/resume.py), under the
    run's lock and before anything is written, and return what its service is checked
    against once it runs (a `ServiceBaseline`); a run that restarts from step 0 (it never
    reached a checkpoint) may start with any config (None)."""
    path = recorded_config(run_dir)
    if path is None or unfinished_attempt(run_dir, backend) is not None:
        return None
    recorded = compose(None, [], base=load_recorded(path))
    accepted += check_resume(recorded, cfg, path, args.accept_config_change)
    for change in accepted:
        print(f"[launcher] resuming with a changed config (accepted): {change}")
    return service_baseline(run_dir, recorded, cfg)


def print_end_of_run(run_dir: Path, note: str | None) -> None:
    """A training run's last lines, printed here once its job returns (the trainers report
    nothing themselves): the validation pass rates per category from the run's records
    (seal/report/summary.py), the job's note (the local trainer's best step), and which
    checkpoint to export."""
    val_dir = run_dir / "validation"
    steps = read_val_dir(val_dir) if val_dir.is_dir() else {}
    if steps:
        print(f"\nvalidation pass rates per category ({val_dir}):\n")
        print(render_markdown(summarize(steps)))
    else:  # e.g. verl with trainer.validation.before_train=false and test_freq=0
        print("\nno validation ran (trainer.validation): no pass rates to show")
    if note:
        print(note)
    print(export_hint(run_dir))


def run(args: argparse.Namespace) -> None:
    cfg = configure(args)
    # A token given on the command line stays in this process's argv, which the lock file
    # and wandb's metadata copy: masked there before anything is written.
    sys.argv[:] = redact_argv(sys.argv, [cfg.service.token])
    check_job(cfg.job, preflight=args.preflight)  # imports nothing: the lock comes first
    if cfg.job == "local" and not args.preflight:  # --preflight shows it in its table
        # Before the run directory is made, and before transformers asks the hub for it.
        refuse_missing_model(cfg.trainer.model.path, cfg.trainer.model.tokenizer)
    run_dir = Path(cfg.output_dir) / cfg.name
    training = cfg.job in TRAINING_JOBS
    trainer = cfg.trainer if training else None
    accepted: list = []
    baseline = None  # what a checked resume compares its service with

    def check_config() -> None:
        nonlocal baseline
        if training and cfg.trainer.checkpoint.resume:
            baseline = _check_resume_config(args, cfg, run_dir, cfg.job, accepted)

    job = None
    service_up = False
    created = not run_dir.exists()

    def import_job() -> None:
        nonlocal job
        if cfg.job == "verl" and cfg.verl.device == "cpu":
            os.environ.update(CPU_PLATFORM_ENV)  # before the job's first `import verl`
        job = job_function(cfg.job, preflight=args.preflight)

    with open_run(run_dir, trainer, cfg.job if training else None, "launcher", check_config) as run:
        start = cfg.service.start or args.with_bfcl
        # The job is imported while the service starts up: seconds of CPU each, side by side.
        log = run_dir / "env_service.log"
        try:
            with service_for_run(cfg.service, start, log, meanwhile=import_job) as service:
                service_up = True
                if args.preflight:
                    print(f"[launcher] preflight of the {cfg.job!r} job of {run_dir}")
                else:
                    changed = []
                    if baseline is not None:
                        ok, changed = check_service(
                            baseline, service.settings, run_dir, args.accept_config_change
                        )
                        for change in ok:
                            print(
                                f"[launcher] resuming with a changed service (accepted): {change}"
                            )
                        accepted += ok
                    record = attempt_record(args, cfg, accepted, service, changed)
                    save_run_files(cfg, run, record)
                    print(f"[launcher] job {cfg.job!r}, outputs in {run_dir}")
                cfg.service.token = ""
                # The job's clients, and the processes it starts, read the token from there.
                try:
                    with token_in_environment(service.token):
                        note = job(cfg, service.url, run, REPO_ROOT / "data/seal_split.json")
                    if training and not args.preflight:
                        print_end_of_run(run_dir, note)
                except (KeyboardInterrupt, Terminated):
                    if training and not args.preflight:
                        hint = commands.resume(run_dir)
                        print(f"\n[launcher] resume with: {hint}", file=sys.stderr)
                    raise
        except BaseException as error:
            # A refused start in a directory of its own leaves none; the service's log stays
            # when the service itself failed (the error names it). A preflight refuses
            # before anything trains: all its files go, the attempt's record with them.
            service_failed = job is not None and not service_up and log.exists()
            if created and isinstance(error, PreflightFailed):
                run.remove()
            elif created and run.attempt is None:
                run.discard(frozenset() if service_failed else {log.name})
            raise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--conf", type=Path, help="experiment config (default: exp/cpu_default.yaml)"
    )
    source.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR with its own recorded config; overrides may "
        "change only the keys a resume may change (seal/launch/resume.py)",
    )
    p.add_argument(
        ACCEPT_FLAG,
        action="store_true",
        help="resume although the config differs from the run's recorded one in keys that "
        "change the experiment; the attempt's record lists the changes",
    )
    p.add_argument(
        "--with-bfcl",
        action="store_true",
        help="start the environment service even if the config does not ask for it",
    )
    p.add_argument("--debug", action="store_true", help="print the full traceback on failure")
    p.add_argument(
        "--explain",
        action="store_true",
        help="print every config key with its value (with --conf and overrides: theirs, "
        "beside the default), documentation, then exit",
    )
    p.add_argument(
        "--preflight",
        action="store_true",
        help="check a verl run (GPUs, driver, memory, disk, the model on every node, Ray CPUs, "
        "the service from every node, shared filesystem, tracking) or a local run (GPU memory) "
        "and exit: 1 on a blocker",
    )
    p.add_argument(
        "overrides", nargs="*", help="config overrides after '--', e.g. service.port=8090"
    )
    args = p.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    if args.explain:
        try:
            values = configure(args)  # without --conf: the main job's, as a run would be
        except (OSError, ValueError, KeyError) as error:
            print(f"[launcher] error: {type(error).__name__}: {error}", file=sys.stderr)
            return 1
        if args.resume:
            source = f"the run {args.resume}"
        elif args.conf:
            source = str(args.conf)
        else:
            source = f"{DEFAULT_CONF.relative_to(REPO_ROOT)} (the main job, no --conf given)"
        given = " with the overrides given" if args.overrides else ""
        print(f"# the config of {source}{given}; a value differing from its default says so\n")
        print(render(RunConfig, values))
        return 0
    try:
        with sigterm_raises():
            run(args)
    except KeyboardInterrupt:
        print("\n[launcher] interrupted; the environment service was stopped", file=sys.stderr)
        return 130
    except Terminated:
        print(
            "[launcher] terminated (SIGTERM); the environment service was stopped", file=sys.stderr
        )
        return TERMINATED_STATUS
    except Exception as e:  # noqa: BLE001 - the launcher's job is to report any failure clearly
        if args.debug:
            traceback.print_exc()
        print(f"[launcher] error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
