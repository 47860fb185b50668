"""The ``ray`` section of a run config: how the job reaches Ray and sizes blocks."""

from __future__ import annotations

from pydantic import Field, model_validator

from cube_ray.pydantic_base import StrictModel

__all__ = ["RayConfig"]


class RayConfig(StrictModel):
    """How the job reaches Ray and sizes its data blocks."""

    address: str | None = None
    """Cluster address (``auto``, ``ray://host:10001``); None starts a local Ray."""
    num_cpus: int | None = Field(default=4, ge=1)
    """Logical CPUs of a local Ray (ignored when connecting to a cluster)."""
    read_batch_size: int = Field(default=2048, ge=1)
    """Rows per block when the driver builds documents and questions."""
    join_partitions: int | None = Field(default=None, ge=1)
    """Partitions of the hash joins; None sizes them from the row count."""
    shuffle_batch_mb: int = Field(default=64, ge=1)
    """MiB of input a hash-join map task partitions at once (Ray Data's
    default is 1 GiB, which makes a join's memory grow with the table up to
    that size)."""
    task_num_cpus: float = Field(default=0.5, gt=0)
    """CPUs per light task (hashing, expanding rows, join aggregators)."""
    write_rows: int = Field(default=65536, ge=1)
    """Rows per Parquet part file of the tables the driver writes itself
    (documents, a question file). LLM stages write one part file per finished
    block of ``4 * pool.batch_size`` rows, from Ray tasks."""
    footer_readers: int = Field(default=2, ge=1)
    """Actors listing Parquet files per table read (Ray Data's default is 32,
    each a Python process of about 100 MB); raise it for remote storage with
    many files."""
    read_unit_mb: int = Field(default=32, ge=1)
    """Most MiB of Parquet row groups one read task loads (Ray Data's default
    is 128, which lets a read task's memory grow with the table)."""
    writer_tasks: int = Field(default=2, ge=1)
    """Most part-file writer tasks of an LLM stage running at once; each holds
    a Ray worker process (~200 MB), and one writes thousands of rows/s."""
    driver_resume_rows: int = Field(default=250_000, ge=0)
    """Up to this many already-written rows of a stage, resume bookkeeping
    (which rows are done, which are stale) runs on the driver with a broadcast
    set; above it, with Ray Data hash joins (no driver memory)."""
    driver_source_mb: int = Field(default=8, ge=0)
    """Up to this many MiB of Parquet files behind a stage's inputs (its
    source table, or the tables joined for it), the driver reads and joins
    them with Arrow and hands Ray Data the result; above it, Ray Data reads
    and hash-joins them in tasks (no driver memory). Small inputs (trials,
    the demo, waves of a few thousand rows) then skip the Parquet footer
    readers and join aggregators, actors that every Ray Data execution
    (every stage, every wave) starts anew. 0: always Ray Data."""
    stage_retries: int = Field(default=5, ge=0)
    """Times in a row a stage is retried after Ray loses a worker, actor or
    node without a row written in between (a retry that makes progress
    resets the count); a retry sends only the rows not yet written."""
    node_loss_wait_s: float = Field(default=45.0, ge=0)
    """Before a retry, wait up to this long for Ray to mark the lost node dead
    (its heartbeat timeout), so the retry is not scheduled on it again."""
    overlap: bool = False
    """Run each stage as soon as the stages it reads have finished, beside the
    others (systems beside the bounds, judges side by side); false runs the
    stages one after another. Off by default until it is measured on a
    cluster: on the idle 2-core development machine it cut a two-judge job
    by 42 % (372 -> 216 s; 194 s with ``waves: 4``; BENCHMARKS.md "Stage
    overlap")."""
    waves: int = Field(default=1, ge=1, le=99)
    """With ``overlap``: split the records into this many waves (by a hash of
    the question id, which is the document id for generated questions) and
    run every stage once per wave. A wave's bounds, systems and judges start
    as soon as that wave's own upstream stages are done, so judges score
    wave 1 while the generator writes wave 2 (block-level overlap); each
    stage runs its waves in order. Every wave is a Ray Data execution of its
    own (an anti-join, the stage, its writers: seconds), so keep a wave at
    thousands of rows or more on a cluster. 1: each stage runs once over all
    records."""
    progress: bool = True
    """Show a progress bar per stage."""
    resource_wait_s: float = Field(default=600.0, ge=0)
    """Before the first stage, wait up to this long for an autoscaler to add
    the nodes a pool needs when no current node can host it (but one of the
    autoscaler's node types can); then stop with exit code 3 and manifest
    status ``resource_timeout``. A demand that no node and no node type can
    meet fails at once (exit code 2)."""

    stall_report_s: float = Field(default=300.0, ge=0)
    """When a running stage writes no row for this long, say so (which stage,
    what Ray has free, what the stage's tasks or actors and the engine pools
    ask), and again after each such interval; the run goes on. 0: never. A
    batch of slow engine calls can take minutes: the default leaves room for
    that."""

    @model_validator(mode="after")
    def _waves_overlap(self) -> RayConfig:
        if self.waves > 1 and not self.overlap:
            msg = (
                f"ray.waves is {self.waves} but ray.overlap is false: waves only "
                "let stages start early when stages overlap; set ray.overlap: "
                "true, or ray.waves: 1"
            )
            raise ValueError(msg)
        return self
