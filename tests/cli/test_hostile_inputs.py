"""Hostile and malformed input, one row each: what a new user types, or leaves lying around in
the run folder and the profile folder, and what scaletrain must answer.

Every row runs in a folder of its own on a login node without Slurm (tests/support/cli.py).
Beyond its own expectation, every row must hold the rules of issue 12: no traceback, no
internal error, an error is one `error:` line with a `HINT:` (exit code 2), and every file
that was there before is still there with the same bytes. The rows that need Slurm's own
commands are in test_hostile_inputs_on_slurm.py.

A row: (name, command line, exit code, text the user must see, files to lay out first).
The command line is split as a shell would; a tuple gives words the shell cannot (newlines).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.clusters.site_files import MINIMAL
from tests.support.cli import assert_clean, invoke, login_node

PROFILES = "config/scaletrain/clusters"
LUMI_8 = "-c lumi -g 8 -t 1:00:00"
JOB = '{"event": "submitted", "job_id": "4242", "time": "2026-01-01T00:00:00+00:00"}\n'
RUN = (
    '{"command": ["python", "-m", "x", "--", "train.py"], "host": "elsewhere", '
    '"started": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:01:00+00:00", '
    '"exit_code": 0}\n'
)
FOLDER = object()  # a file entry that is a folder
Files = Mapping[str, str | bytes | object]


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    exit_code: int
    says: str = ""
    """Text the user must see (stderr and stdout together, as on a terminal)."""
    files: Files = field(default_factory=dict)
    stdout: str = ""
    """Text that must be on stdout (a result), not only on stderr."""


def case(
    id: str,
    args: str | tuple[str, ...],
    exit_code: int,
    says: str = "",
    files: Files | None = None,
    stdout: str = "",
) -> Case:
    words = tuple(shlex.split(args)) if isinstance(args, str) else args
    return Case(id, words, exit_code, says, files or {}, stdout)


def profile(name: str, text: str | bytes) -> Files:
    return {f"{PROFILES}/{name}.toml": text}


def mysite(old: str, new: str) -> Files:
    assert old in MINIMAL, old
    return profile("mysite", MINIMAL.replace(old, new))


MYSITE_PLAN = "plan -c mysite -g 4 -t 1:00:00 train.py"
NEWLINE_VALUE = mysite("[billing]", '[environment]\nX = "1\\n#SBATCH --uid=0"\n[billing]')
NO_PARTITIONS = mysite(
    '[partitions.gpu]\nmax_time = "2-00:00:00"\n'
    'billing = { rule = "sum", units_per_gpu_hour = 1 }\n',
    "",
)
BAD_JOBS = b'\xff{"event": "submitted"}\n' + JOB.encode()

# fmt: off
CASES = [
    # --- tracebacks the issue found: files and folders that are not what they seem
    case("runs-dir is a file", f"submit {LUMI_8} --runs-dir afile --name x train.py", 2,
         "afile is a file, so the run folder afile/x cannot be made", {"afile": "x"}),
    case("profile with an unknown placeholder", "clusters show mysite", 2,
         "may hold no braces but {gpus}", mysite("gpu:h100:{gpus}", "gpu:{model}:{gpus}")),
    case("profile that is not UTF-8", "clusters show bad", 2, "is not UTF-8 text",
         profile("bad", b'description = "\xff\xfe"\n')),
    case("profile that is a folder", "clusters show dir", 2, "give a file there",
         {f"{PROFILES}/dir.toml": FOLDER}),
    case("profile folder listed with a folder in it", "clusters", 0, "give a file there",
         {f"{PROFILES}/dir.toml": FOLDER}),
    *(
        case(f"{command} with non-UTF-8 jobs.jsonl", f"{command} r", 2,
             "Line 1 of runs/r/jobs.jsonl is not a job record", {"runs/r/jobs.jsonl": BAD_JOBS})
        for command in ("status", "logs", "cancel")
    ),
    case("submit over a binary plan.toml", f"submit {LUMI_8} --name same train.py", 2,
         "runs/same/plan.toml is not UTF-8 text", {"runs/same/plan.toml": b"\x00\xff\x80"}),
    # --- wrong words: markup, misleading states, suggestions
    case("job name with markup", f"plan {LUMI_8} --job-name '[bold]x' train.py", 2,
         "The job name '[bold]x' is not usable"),
    case("unknown field keeps its [section]", "clusters show mysite", 2,
         "in the wrong [section]", mysite("[node]\n", "[node]\ncolour = 1\n")),
    case("jobs.jsonl that is not JSON", "status r", 2, "jobs.jsonl has no submission",
         {"runs/r/jobs.jsonl": "hello"}),
    case("jobs.jsonl with a bad line in the middle", "logs r", 2, "Line 1 of",
         {"runs/r/jobs.jsonl": "[1, 2]\n" + JOB}),
    case("jobs.jsonl naming no job id", "status r", 2, "is not a job record",
         {"runs/r/jobs.jsonl": JOB.replace("4242", "-h") + JOB}),
    case("jobs.jsonl that is a folder", "status r", 2, "runs/r/jobs.jsonl",
         {"runs/r/jobs.jsonl": FOLDER}),
    case("largest request a partition takes",
         "plan -c lumi -g 40 -p small-g -t 1:00:00 train.py", 2,
         "ask for --partition standard-g, or --gpus 32, or --gpus 8."),
    # --- silently accepted before
    case("missing container image", f"plan {LUMI_8} --container missing.sif train.py", 2,
         "The container image 'missing.sif' does not exist"),
    case("container image that exists", f"plan {LUMI_8} --container image.sif train.py", 0,
         files={"image.sif": "x"}, stdout="#SBATCH --partition=small-g"),
    case("container image from a registry",
         f"plan {LUMI_8} --container docker://pytorch/pytorch train.py", 0),
    case("doctor on an empty folder", "doctor empty", 2, "holds no logs", {"empty": FOLDER}),
    case("plan of a missing script", f"plan {LUMI_8} missing.py", 2,
         "The training script 'missing.py' does not exist"),
    case("plan of a folder as script", f"plan {LUMI_8} afolder", 2, "does not exist",
         {"afolder": FOLDER}),
    case("plan with a job name with a space", f"plan {LUMI_8} --job-name 'a b' train.py", 2,
         "The job name 'a b' is not usable"),
    case("submit with a run name with a space", f"submit {LUMI_8} --name 'a b' train.py", 2,
         "The run name 'a b' is not usable"),
    case("plan of a script whose name has a space", f"plan {LUMI_8} 'my train.py'", 0,
         files={"my train.py": ""}),
    case("profile value with a newline and #SBATCH", MYSITE_PLAN, 2,
         "environment.X holds a line break", NEWLINE_VALUE),
    case("submit refuses what plan refuses",
         "submit -c mysite -g 4 -t 1:00:00 --dry-run train.py", 2,
         "environment.X holds a line break", NEWLINE_VALUE),
    case("profile setup line with a newline", MYSITE_PLAN, 2, "software.setup[0] holds a line",
         mysite("[billing]", '[software]\nsetup = ["module load a\\nrm -rf ~"]\n[billing]')),
    case("profile partition name sbatch cannot read", MYSITE_PLAN, 2,
         "cannot be written as an #SBATCH line", mysite("[partitions.gpu]", '[partitions."g p"]')),
    case("time that Slurm reads as minutes:seconds", "plan -c lumi -g 8 -t 1:00 train.py", 0,
         "Slurm reads --time 1:00 as minutes:seconds, 0:01:00 (1 minute); "
         "for 1 hour(s) write --time 1:00:00."),
    # --- nothing submitted by surprise
    case("dry run after the script", "submit -c puhti -g 4 -t 1:00:00 train.py --dry-run", 2,
         "put --dry-run before train.py"),
    case("dry run as --dry-run=", f"submit {LUMI_8} train.py --dry-run=1", 2,
         "'--dry-run=1' comes after the script"),
    case("a short option of ours after the script", f"plan {LUMI_8} train.py -g 16", 2,
         "put -g before train.py"),
    case("run's own option after the script", "run train.py --nproc 2", 2,
         "put --nproc before train.py"),
    case("an option after -- is the script's",
         f"submit {LUMI_8} --dry-run train.py -- --dry-run --name x", 0,
         stdout="-- train.py --dry-run --name x &"),
    case("the script's own options pass", f"plan {LUMI_8} --json train.py --epochs 3 --lr=0.1", 0,
         stdout='"--lr=0.1"'),
    case("shell code in script arguments is quoted",
         f"submit {LUMI_8} --dry-run train.py '$(rm -rf ~)' '`id`'", 0,
         stdout="train.py '$(rm -rf ~)' '`id`' &"),
    # --- output a user can pipe
    case("clusters on stdout", "clusters", 0, stdout="│ lumi"),
    case("clusters as JSON", "clusters --json", 0, stdout='"name": "lumi"'),
    case("clusters show on stdout", "clusters show puhti", 0, stdout="puhti: CSC Puhti"),
    case("clusters show as JSON", "clusters show mahti --json", 0, stdout='"gpusmall"'),
    case("plan on stdout, unwrapped", "plan -c lumi -g 16 -t 2:00:00 train.py", 0,
         stdout="16 = 2 nodes × 8 GPUs; Slurm starts 1 task per node, torchrun starts 8 "
                "processes in it"),
    # --- a newcomer's first minutes
    case("status of the newest run, local", "status", 0, files={"runs/demo/run.json": RUN},
         stdout="finished"),
    case("status of a local run as JSON", "status --json demo", 0,
         files={"runs/demo/run.json": RUN}, stdout='"where": "local"'),
    case("status of a run killed without a record of its end", "status", 0,
         files={"runs/demo/run.json": RUN.replace('"finished"', '"other"')},
         stdout="ended without recording how"),
    case("status with a damaged summary", "status", 0,
         files={"runs/demo/run.json": RUN, "runs/demo/metrics/summary.json": b"\xff{"},
         stdout="finished"),
    case("status of a run.json with pid 0", "status demo", 0,
         files={"runs/demo/run.json": RUN.replace('"finished": "2026-01-01T00:01:00+00:00",',
                                                   '"pid": 0,')},
         stdout="ended without"),
    case("an empty run name is no name", f"submit {LUMI_8} --name '' --dry-run train.py", 0,
         stdout="#SBATCH --job-name=train-"),
    case("local run name with a slash", "run --name ../x train.py", 2,
         "The run name '../x' is not usable"),
    case("flag with a value", "--debug true", 2, "No such command 'true'"),
    case("help shows no types of flags", "submit --help", 0, stdout="SCRIPT [ARGS]..."),
    # --- names
    *(
        case(f"run name {name!r}", ("submit", *shlex.split(LUMI_8), "--name", name, "train.py"), 2,
             "is not usable as a Slurm job name")
        for name in ("../x", "a/b", "a\nb", "x" * 129, "ünï", "a;b", "$(id)", "-x", ".", "..")
    ),
    case("account with a space", f"plan {LUMI_8} -A 'my project' train.py", 2,
         "cannot be written as an #SBATCH line"),
    case("account with a newline",
         ("plan", *shlex.split(LUMI_8), "-A", "p\n#SBATCH --x", "train.py"), 2,
         "cannot be written as an #SBATCH line"),
    case("cluster name that is a path", "plan -c ../../etc/passwd -g 1 -t 1:00:00 train.py", 2,
         "There is no cluster profile called"),
    case("empty cluster name", "plan -c '' -g 1 -t 1:00:00 train.py", 2,
         "There is no cluster profile called ''"),
    case("unknown partition", f"plan {LUMI_8} -p small train.py", 2, "did you mean 'small-g'?"),
    case("unknown launch mode", f"plan {LUMI_8} -m mpirun train.py", 2, "mpirun"),
    # --- numbers and times
    *(
        case(f"time {time!r}", ("plan", "-c", "lumi", "-g", "8", "-t", time, "train.py"), 2, says)
        for time, says in (
            ("", "is not a Slurm time limit"),
            ("abc", "is not a Slurm time limit"),
            ("0", "is zero"),
            ("-1", "is not a Slurm time limit"),
            ("1:2:3:4", "is not a Slurm time limit"),
            ("99999999999", "small-g runs jobs for at most 3 days"),
            ("1-", "is not a Slurm time limit"),
        )
    ),
    *(
        case(f"gpus {gpus!r}", f"plan -c lumi -g {gpus} -t 1:00:00 train.py", 2, says)
        for gpus, says in (
            ("0", "is not a positive number"),
            ("-1", "is not a positive number"),
            ("x", "Invalid value for '--gpus'"),
            ("1000000000000", "HINT: ask for --gpus 8192, or --gpus 256, or --gpus 32."),
            ("12", "do not fill whole nodes"),
        )
    ),
    case("gpus with nodes", f"plan {LUMI_8} -N 2 train.py", 2, "not both"),
    case("no GPUs named", "plan -c lumi -t 1:00:00 train.py", 2, "names no GPUs"),
    case("uneven global batch", f"plan {LUMI_8} --global-batch-size 100 train.py", 2,
         "cannot be split evenly"),
    case("more cores than a node", f"plan {LUMI_8} --cpus-per-gpu 1000000 train.py", 2,
         "ask for at most --cpus-per-gpu 7"),
    case("negative stop margin", f"submit {LUMI_8} --stop-margin -5 --dry-run train.py", 2,
         "--stop-margin -5 is negative"),
    case("stop margin beyond the time limit",
         f"submit {LUMI_8} --stop-margin 99999 --dry-run train.py", 2,
         "is not shorter than the time limit"),
    case("negative requeues", f"submit {LUMI_8} --max-requeues -1 --dry-run train.py", 2,
         "--max-requeues -1 is negative"),
    case("negative restarts for run", "run --max-restarts -1 train.py", 2,
         "--max-restarts -1 is negative"),
    case("nproc that is not a number", "run --nproc two train.py", 2,
         "--nproc 'two' is not a number"),
    case("run of a missing script", "run missing.py", 2,
         "The training script 'missing.py' does not exist"),
    case("check with bad masks", "check --expected-cpu-masks zz", 2,
         "is not a list of hex CPU masks"),
    case("bench with a bad size", "bench --sizes 12Q", 2, "12Q"),
    # --- run folders and run names
    case("status with no runs", "status", 2, "There are no run folders in runs/."),
    case("status of an unknown run", "status nope", 2, "There is no run named 'nope'",
         {"runs/r": FOLDER}),
    case("runs-dir that is a file for status", "status --runs-dir afile", 2,
         "There are no run folders in afile/.", {"afile": "x"}),
    case("logs of a local run without logs", "logs demo", 2, "has no output of rank 0",
         {"runs/demo/run.json": RUN}),
    case("logs of a local run", "logs demo", 0, files={"runs/demo/run.json": RUN,
         "runs/demo/logs/rank-0.out": "step 1\n"}, stdout="step 1"),
    case("cancel of a finished local run", "cancel demo", 0, "is not running: finished",
         {"runs/demo/run.json": RUN}),
    case("cancel without Slurm", "cancel r", 2, "Slurm's scontrol was not found",
         {"runs/r/jobs.jsonl": JOB}),
    case("status of a damaged run.json", "status demo", 2, "runs/demo/run.json is not a run record",
         {"runs/demo/run.json": "[1"}),
    case("status of a run.json of the wrong shape", "status demo", 2,
         "runs/demo/run.json is not a run record",
         {"runs/demo/run.json": '{"command": "python train.py", "pid": "x"}'}),
    case("status of a binary run.json", "status demo", 2, "is not UTF-8 text",
         {"runs/demo/run.json": b"\x80\x81"}),
    case("status of a run.json that is a folder", "status demo", 2, "runs/demo/run.json",
         {"runs/demo/run.json": FOLDER}),
    case("doctor of a run with a damaged run.json", "doctor runs/demo", 0, "is not a run record",
         {"runs/demo/run.json": "{", "runs/demo/logs/a.out": "ok"}),
    case("doctor of a missing path", "doctor nowhere", 2, "is neither a log file"),
    case("doctor of a binary log", "doctor x.log", 0, "no known failure signature",
         {"x.log": bytes(range(256))}),
    case("doctor as JSON", "doctor --json x.log", 1,
         files={"x.log": "[rank1]: RuntimeError: Address already in use\n"},
         stdout='"id": "address-in-use"'),
    case("submit over a plan.toml of the wrong shape", f"submit {LUMI_8} --name same train.py", 2,
         "runs/same/plan.toml is not a plan scaletrain can read",
         {"runs/same/plan.toml": "cluster = 1\n"}),
    case("submit over a plan.toml that is a folder", f"submit {LUMI_8} --name same train.py", 2,
         "runs/same/plan.toml", {"runs/same/plan.toml": FOLDER}),
    case("submit without Slurm writes nothing", f"submit {LUMI_8} --name x train.py", 2,
         "Slurm's sbatch was not found"),
    # --- profiles
    *(
        case(f"profile: {what}", "clusters show mysite", 2, says, files)
        for what, says, files in (
            ("empty file", "description: missing (required)", profile("mysite", "")),
            ("not TOML", "is not valid TOML", profile("mysite", "[node\n")),
            ("no partitions", "partitions", NO_PARTITIONS),
            ("negative GPUs", "node.gpus", mysite("gpus = 4", "gpus = -4")),
            ("huge numbers", "default_per_gpu.cores", mysite("cores = 16", "cores = 1" + "0" * 30)),
            ("a name field", "field 'name' is not allowed",
             mysite("description", 'name = "x"\ndescription')),
            ("a bad time limit", "max_time", mysite('"2-00:00:00"', '"two days"')),
            ("an unknown billing rule", "billing", mysite('rule = "sum"', 'rule = "free"')),
            ("a GPU option without {gpus}", "must be an sbatch option with {gpus}",
             mysite("gpu:h100:{gpus}", "gpu:h100:4")),
            ("a bad variable name", "is not an environment variable name",
             mysite("[billing]", '[environment]\n"A B" = "1"\n[billing]')),
            ("a NUL in a value", "holds a line break", mysite('"my site"', '"my\\u0000site"')),
            ("binary", "is not UTF-8 text", profile("mysite", bytes(range(256)))),
        )
    ),
    case("profile whose name has markup", "clusters show '[red]x'", 0,
         files=profile("[red]x", MINIMAL), stdout="[red]x: my site"),
]
# fmt: on


def _write(root: Path, files: Files) -> dict[Path, bytes | None]:
    """Create the files; return what each path holds (None for a folder)."""
    before: dict[Path, bytes | None] = {}
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is FOLDER:
            path.mkdir()
            before[path] = None
        else:
            data = content.encode() if isinstance(content, str) else content
            assert isinstance(data, bytes)
            path.write_bytes(data)
            before[path] = data
    return before


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = _write(tmp_path, {"train.py": "print('hi')\n", **case.files})
    outcome = invoke(*case.args, env=login_node(tmp_path))
    command = f"scaletrain {shlex.join(case.args)}"
    assert_clean(outcome, command)
    shown = outcome.stdout + outcome.stderr
    assert outcome.exit_code == case.exit_code, f"{command}:\n{shown}"
    assert case.says in " ".join(shown.split()), f"{command}:\n{shown}"
    assert case.stdout in outcome.stdout, f"{command}:\n{shown}"
    for path, content in before.items():  # nothing that was there is lost or changed
        assert path.is_dir() if content is None else path.read_bytes() == content, path
    if outcome.exit_code == 2:  # a refused command leaves no run folder behind
        runs = tmp_path / "runs"
        left = set(runs.rglob("*")) if runs.is_dir() else set()
        assert left <= {*before, *(parent for path in before for parent in path.parents)}
