"""``rank_shard``: equal, contiguous, disjoint shards of a Parquet dataset, read through ``pyarrow.dataset``."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_horovod.runtime import rank_shard


@pytest.fixture
def dataset(tmp_path):
    """Three part files of uneven sizes (10 + 3 + 8 = 21 rows), plus the marker files Spark writes."""
    start = 0
    for name, rows in (("part-00000.parquet", 10), ("part-00001.parquet", 3), ("part-00002.parquet", 8)):
        pq.write_table(
            pa.table({"x": list(range(start, start + rows)), "y": [i * 2 for i in range(start, start + rows)]}),
            tmp_path / name,
        )
        start += rows
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / ".part-00000.parquet.crc").write_text("not parquet")
    return tmp_path


@pytest.mark.parametrize("size", [1, 2, 4, 5])
def test_every_rank_gets_the_same_number_of_rows_in_order(dataset, size):
    shards = [rank_shard(str(dataset), rank, size).column("x").to_pylist() for rank in range(size)]
    per_rank = 21 // size
    assert all(len(shard) == per_rank for shard in shards)
    assert sum(shards, []) == list(range(per_rank * size))  # contiguous, disjoint, in file order


def test_columns_and_bad_arguments(dataset):
    assert rank_shard(str(dataset), 1, 2, columns=["y"]).column_names == ["y"]
    with pytest.raises(ValueError, match="rank must be in 0..size-1"):
        rank_shard(str(dataset), 2, 2)
    with pytest.raises(ValueError, match="has 21 rows, fewer than size=22 ranks"):
        rank_shard(str(dataset), 0, 22)
