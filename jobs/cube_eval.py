"""Ray Jobs entrypoint: run a CuBE config on the cluster the job was submitted to.

    ray job submit --address http://HEAD:8265 --working-dir . -- \
        python jobs/cube_eval.py conf/guangdong.yaml [--out RUN_DIR] [--limit N]

The job's driver runs on the head node and connects to the cluster
(``--address auto``, unless given); the run directory must be on storage that
the head node can write (and that you can read afterwards, e.g. a shared
mount). Rerunning the same command resumes the run.
"""

from __future__ import annotations

import sys

from cube_ray.cli import main


def job_argv(argv: list[str]) -> list[str]:
    """``cube-ray run`` arguments for a job: connect to the job's cluster."""
    args = ["run", *argv]
    if not any(a == "--address" or a.startswith("--address=") for a in argv):
        args += ["--address", "auto"]
    return args


if __name__ == "__main__":
    sys.exit(main(job_argv(sys.argv[1:])))
