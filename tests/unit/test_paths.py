"""Artifact and staging directory names: one per task instance and try, whatever characters the ids hold; an earlier
try's directory read back from the latest one's."""

from __future__ import annotations

import random
import re
import string
from types import SimpleNamespace

import pytest

from airflow_provider_horovod.paths import (
    NAME_MAX,
    data_dir,
    decode_id_path,
    default_artifact_dir,
    default_staging_dir,
    encode_id_path,
    try_artifact_dir,
)

RUN = "manual__2026-01-01T00:00:00+00:00"
ENCODED = re.compile(r"[A-Za-z0-9._~-]+")


@pytest.fixture
def root(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__HOROVOD__ARTIFACT_ROOT", str(tmp_path))
    return tmp_path


def dirs(task_id: str, run_id: str = RUN, dag_id: str = "d") -> tuple[str, str]:
    ti = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id, try_number=1, map_index=-1)
    return default_artifact_dir({"ti": ti}), default_staging_dir({"ti": ti})


def test_tasks_whose_ids_differ_only_in_non_ascii_characters_get_their_own_directories(root):
    ja, zh = dirs("train_日本"), dirs("train_中国")
    assert ja[0] != zh[0] and ja[1] != zh[1]
    assert ja == (
        f"{root}/d/manual__2026-01-01T00~3A00~3A00~2B00~3A00/train_~E6~97~A5~E6~9C~AC/try-1",
        f"{root}/.staging/d/manual__2026-01-01T00~3A00~3A00~2B00~3A00/train_~E6~97~A5~E6~9C~AC/try-1",
    )
    assert zh[0].endswith("/train_~E4~B8~AD~E5~9B~BD/try-1")
    assert all(p.isascii() for p in ja + zh)


def test_ids_that_differ_in_one_punctuation_character_get_their_own_directories(root):
    for a, b, c in (("a:b", "a+b", "a_b"), ("x=1", "x~3D1", "x_1"), ("t.1", "t~2E1", "t%2E1")):
        for place in ("run_id", "task_id", "dag_id"):
            found = {dirs(**{"task_id": "t", "run_id": RUN, place: v}) for v in (a, b, c)}
            assert len({artifact for artifact, _ in found}) == 3 and len({staging for _, staging in found}) == 3


def test_plain_ids_read_as_themselves():
    for plain in ("train", "horovod_digits_retraining", "group.train-2", "scheduled__2026-01-01", "A-Z_a.z09"):
        assert encode_id_path(plain) == plain
    assert encode_id_path(RUN) == "manual__2026-01-01T00~3A00~3A00~2B00~3A00"
    assert encode_id_path("~") == "~7E" and encode_id_path("a/b") == "a~2Fb" and encode_id_path("a b") == "a~20b"


def test_no_name_is_dot_dotdot_hidden_or_empty_and_no_dag_is_the_staging_directory(root):
    assert [encode_id_path(v) for v in (".", "..", ".staging", "...x")] == ["~2E", "~2E.", "~2Estaging", "~2E..x"]
    assert dirs("t", dag_id=".staging")[0] == f"{root}/~2Estaging/{encode_id_path(RUN)}/t/try-1"
    with pytest.raises(ValueError, match="empty"):
        encode_id_path("")


def _names_of_ids(path: str) -> list[str]:
    """Read a relative path of encoded ids back into the ids: each id ends at the first name without a final '~'."""
    ids, current = [], []
    for name in path.split("/"):
        current.append(name)
        if not name.endswith("~"):
            ids.append(decode_id_path("/".join(current)))
            current = []
    assert not current
    return ids


def test_long_ids_become_nested_names_that_still_say_where_each_id_ends():
    long_ascii, long_cjk, long_dots = "x" * 250, "日本" * 125, "." * 250  # Airflow ids have up to 250 characters
    for value in (long_ascii, long_cjk, long_dots, "a" * 254 + ":" + "b"):
        path = encode_id_path(value)
        names = path.split("/")
        assert all(0 < len(n) <= NAME_MAX and n not in (".", "..") and not n.startswith(".") for n in names)
        assert decode_id_path(path) == value
    assert encode_id_path(long_ascii) == long_ascii  # 250 bytes: one name
    assert len(encode_id_path(long_cjk).split("/")) == 9  # 250 characters of 3 UTF-8 bytes, 9 bytes encoded apiece
    # a split id followed by a name that could have been the rest of it: the '~' says the id went on
    tail_like = "y" * 254 + "map-3"
    assert _names_of_ids(f"{encode_id_path(tail_like)}/try-1") == [tail_like, "try-1"]
    assert _names_of_ids(f"{encode_id_path('y' * 254)}/map-3/try-1") == ["y" * 254, "map-3", "try-1"]


def _random_id(rng: random.Random) -> str:
    alphabet = [string.ascii_letters, string.digits, "._-~:+=/%@ ", "日本中国ßéø", "\x00\n\t\U0001f600\ud800\udfff"]
    size = rng.choice([1, 2, 5, 40, 250])
    chars = []
    for _ in range(size):
        kind = rng.random()
        if kind < 0.6:
            chars.append(rng.choice(rng.choice(alphabet)))
        else:  # any code point, surrogates included
            chars.append(chr(rng.randrange(0x110000)))
    return "".join(chars)


def test_the_encoding_is_injective_and_ascii_over_many_generated_ids():
    rng = random.Random(20260101)
    seen: dict[str, str] = {}
    for _ in range(3000):
        value = _random_id(rng)
        path = encode_id_path(value)
        names = path.split("/")
        assert all(ENCODED.fullmatch(n) and len(n) <= NAME_MAX and not n.startswith(".") for n in names), value
        assert decode_id_path(path) == value
        assert seen.setdefault(path, value) == value  # never two ids for one path
    # a whole try's relative path reads back into its ids
    for _ in range(300):
        ids = [_random_id(rng) for _ in range(3)]
        assert _names_of_ids("/".join(encode_id_path(v) for v in ids) + "/try-1") == [*ids, "try-1"]


def test_decoding_refuses_what_the_encoding_never_writes():
    for bad in ("a:b", "a~3ab", "a~3", "~", "a~/", "a/b", "", "~E6"):
        with pytest.raises(ValueError):
            decode_id_path(bad)


@pytest.mark.parametrize(
    ("path", "current", "wanted", "expected"),
    [
        ("/a/train/try-3", 3, 3, "/a/train/try-3"),
        ("/a/train/try-3", 3, 1, "/a/train/try-1"),
        ("s3://b/train/try-3/", 3, 2, "s3://b/train/try-2"),
        ("/a/train/try-1", 2, 1, None),  # a reattached job's directory: not this try's name
        ("/chosen/by/the/author", 2, 1, None),
    ],
)
def test_earlier_tries_directories(path, current, wanted, expected):
    assert try_artifact_dir(path, current, wanted) == expected


def test_a_runs_data_directory_is_named_as_its_training_directories_are(root, monkeypatch):
    assert data_dir(RUN) == f"{root}/data/manual__2026-01-01T00~3A00~3A00~2B00~3A00"
    assert data_dir(RUN, "ddp") == f"{root}/data/ddp/{encode_id_path(RUN)}"
    monkeypatch.setenv("AIRFLOW__HOROVOD__ARTIFACT_ROOT", "s3://bucket/models/")
    assert data_dir("r:1") == "s3://bucket/models/data/r~3A1"
