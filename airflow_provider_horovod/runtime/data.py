"""
Reading a Spark-written Parquet dataset as this rank's shard, with the same number of rows on every rank.

Why not petastorm, which Databricks' HorovodRunner docs used: petastorm 0.13.1 (its latest release) builds its
reader on ``pyarrow.parquet.ParquetDataset(validate_schema=..., metadata_nthreads=...)`` and ``dataset.pieces``,
the legacy dataset API that pyarrow removed in version 15; with the pyarrow Spark 4 brings (26.x here) its reader
fails with ``TypeError: ParquetDataset.__init__() got an unexpected keyword argument 'validate_schema'``. So this
helper uses ``pyarrow.dataset`` directly: row counts come from the Parquet footers (no data read), each rank reads
only the fragments that overlap its row range, and every rank gets ``total_rows // size`` rows, so no rank runs
out of batches and hangs in an allreduce the others never join.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def rank_shard(
    path: str,
    rank: int | None = None,
    size: int | None = None,
    *,
    columns: Sequence[str] | None = None,
    filesystem: Any = None,
) -> Any:
    """
    This rank's contiguous shard of a Parquet dataset, as a ``pyarrow.Table``.

    The dataset's rows, in file order (Spark's ``part-*`` files sorted by name), are cut into ``size`` equal
    shards of ``total_rows // size`` rows; the last ``total_rows % size`` rows are left out so that every rank
    runs the same number of steps. Shuffle inside the shard if order matters.

    :param path: a directory of Parquet files (what ``DataFrame.write.parquet`` makes; ``_SUCCESS`` and other
        non-data files are ignored), a single file, or an fsspec/``pyarrow`` URI such as ``s3://bucket/features``.
    :param rank: this rank (default ``hvd.rank()``; Horovod must be initialised).
    :param size: the number of ranks (default ``hvd.size()``).
    :param columns: the columns to read (default all).
    :param filesystem: a ``pyarrow.fs`` or fsspec filesystem for ``path`` (default: inferred from the URI).
    :return: a ``pyarrow.Table`` of ``total_rows // size`` rows (``.to_pandas()``, ``.column(name).to_numpy()``).
    :raises ValueError: ``rank``/``size`` out of range, or the dataset has fewer rows than ranks.
    :raises ImportError: ``pyarrow`` is not installed on the executor.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    if rank is None or size is None:
        import horovod.torch as hvd

        rank = hvd.rank() if rank is None else rank
        size = hvd.size() if size is None else size
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank must be in 0..size-1 and size >= 1, got rank={rank}, size={size}")
    dataset = ds.dataset(
        path, format="parquet", filesystem=filesystem, exclude_invalid_files=False, ignore_prefixes=[".", "_"]
    )
    fragments = sorted(dataset.get_fragments(), key=lambda fragment: fragment.path)
    counts = [fragment.count_rows() for fragment in fragments]  # from the footers: no data is read
    total = sum(counts)
    per_rank = total // size
    if per_rank == 0:
        raise ValueError(
            f"the dataset at {path} has {total} rows, fewer than size={size} ranks: every rank needs at least one"
        )
    start, stop = rank * per_rank, (rank + 1) * per_rank
    pieces = []
    offset = 0
    for fragment, count in zip(fragments, counts, strict=True):
        lo, hi = max(start, offset), min(stop, offset + count)
        if lo < hi:
            table = fragment.to_table(columns=list(columns) if columns is not None else None)
            pieces.append(table.slice(lo - offset, hi - lo))
        offset += count
        if offset >= stop:
            break
    return pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
