"""
DeepSpeed through the provider's launcher on a real local Spark: ``DeepspeedTorchDistributor`` (PySpark's API) runs an
unchanged DeepSpeed script (ZeRO stage 2, a plain torch optimizer, CPU accelerator and Gloo) on a barrier stage and on
the driver, resumes from its sharded checkpoint, and runs functions as ``TorchDistributor`` does.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import tempfile

import pytest

from airflow_provider_horovod.runtime import DeepspeedTorchDistributor
from airflow_provider_horovod.runtime.deepspeed_distributor import run_deepspeed_script

pytestmark = pytest.mark.spark

# A pinned test dependency, never skipped: collecting this module fails without it. Only the ranks import it (about
# 2.5 s, mlflow's import included where mlflow is installed), not the test process.
DEEPSPEED_VERSION = importlib.metadata.version("deepspeed")

# As written for `deepspeed train.py --deepspeed --deepspeed_config ds.json` or torchrun; only the JSON it writes at
# the end is the test's. A plain torch optimizer: no DeepSpeed C++ optimizer op is built.
DEEPSPEED_SCRIPT = """
import argparse
import json
import os

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.accelerator import get_accelerator

parser = argparse.ArgumentParser()
parser.add_argument("--save_dir", required=True)
parser.add_argument("--steps", type=int, default=1)
parser.add_argument("--local_rank", type=int, default=-1)  # what the deepspeed launcher passes
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
engine, _, _, _ = deepspeed.initialize(args=args, model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2))
resumed_from = 0
if os.path.exists(os.path.join(args.save_dir, "latest")):
    engine.load_checkpoint(args.save_dir)
    resumed_from = engine.global_steps
data = torch.Generator().manual_seed(1000 * resumed_from + dist.get_rank())  # each rank its own batches
for _ in range(args.steps):
    x = torch.randn(engine.train_micro_batch_size_per_gpu(), 8, generator=data)
    loss = (engine(x) - x.sum(1, keepdim=True)).pow(2).mean()
    engine.backward(loss)
    engine.step()
engine.save_checkpoint(args.save_dir, tag=f"global_step{engine.global_steps}")
with open(os.path.join(args.save_dir, f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(
        {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "zero_stage": engine.zero_optimization_stage(),
            "resumed_from": resumed_from,
            "global_step": engine.global_steps,
            "accelerator": get_accelerator().device_name(),
            "backend": dist.get_backend(),
            "deepspeed": args.deepspeed,
            "deepspeed_config": args.deepspeed_config,
        },
        f,
    )
"""

# 2 ranks x 4 samples; ZeRO-2 shards the optimizer state (one *_optim_states.pt per rank). A torch optimizer under
# ZeRO is "untested" to DeepSpeed, which then asks for this opt-in.
DS_CONFIG = {
    "train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 2},
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 1000,
}


def _ranks(save_dir) -> list[dict]:
    return [json.loads((save_dir / f"rank{r}.json").read_text()) for r in (0, 1)]


def _assert_cpu_zero2(runs, *, resumed_from, global_step):
    assert [r["rank"] for r in runs] == [0, 1]
    for r in runs:
        assert (r["world_size"], r["zero_stage"], r["accelerator"], r["backend"], r["deepspeed"]) == (
            2,
            2,
            "cpu",
            "gloo",
            True,
        )
        assert (r["resumed_from"], r["global_step"]) == (resumed_from, global_step)


def test_an_unchanged_zero2_script_trains_on_a_barrier_stage_and_resumes_from_its_sharded_checkpoint(spark, tmp_path):
    """
    ``numGpus=1, nnodes=2``: two "nodes" of one process each is what the barrier stage is (2 tasks, one rank each);
    ``numGpus=2, nnodes=1`` makes the same stage (as in PySpark, where distributed mode starts one process per task).
    """
    script = tmp_path / "train_ds.py"
    script.write_text(DEEPSPEED_SCRIPT)
    save_dir, rank_tmp = tmp_path / "checkpoints", tmp_path / "rank_tmp"
    save_dir.mkdir()
    rank_tmp.mkdir()
    distributor = DeepspeedTorchDistributor(
        numGpus=1, nnodes=2, localMode=False, useGpu=False, deepspeedConfig=DS_CONFIG, env={"TMPDIR": str(rank_tmp)}
    )
    assert distributor.deepspeed_config is DS_CONFIG and distributor.num_processes == 2

    assert distributor.run(str(script), "--save_dir", str(save_dir), "--steps", 2) is None
    runs = _ranks(save_dir)
    _assert_cpu_zero2(runs, resumed_from=0, global_step=2)
    # the dict was written where each rank runs (its TMPDIR), a file per rank, removed when the script returned
    configs = [r["deepspeed_config"] for r in runs]
    assert len(set(configs)) == 2 and all(os.path.dirname(c) == str(rank_tmp) for c in configs)
    assert not any(os.path.exists(c) for c in configs) and not list(rank_tmp.glob("*.json"))
    step2 = save_dir / "global_step2"
    assert (save_dir / "latest").read_text() == "global_step2"
    assert sorted(p.name for p in step2.iterdir()) == [
        "mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",  # ZeRO-2: each rank saved its shard of the optimizer state
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ]

    distributor.run(str(script), "--save_dir", str(save_dir), "--steps", 1)
    _assert_cpu_zero2(_ranks(save_dir), resumed_from=2, global_step=3)  # went on from run 1's last step
    assert (save_dir / "latest").read_text() == "global_step3"
    assert len(list((save_dir / "global_step3").glob("zero_pp_rank_*_optim_states.pt"))) == 2


def test_the_script_on_the_driver_with_the_configuration_as_a_file(spark_env, tmp_path, monkeypatch):
    (tmp_path / "train_ds.py").write_text(DEEPSPEED_SCRIPT)
    (tmp_path / "ds_config.json").write_text(json.dumps(DS_CONFIG))
    save_dir = tmp_path / "checkpoints"
    save_dir.mkdir()
    monkeypatch.chdir(tmp_path)  # relative paths, made absolute against the caller's directory
    DeepspeedTorchDistributor(numGpus=2, localMode=True, useGpu=False, deepspeedConfig="ds_config.json").run(
        "train_ds.py", "--save_dir", str(save_dir)
    )
    runs = _ranks(save_dir)
    _assert_cpu_zero2(runs, resumed_from=0, global_step=1)
    assert {r["deepspeed_config"] for r in runs} == {str(tmp_path / "ds_config.json")}  # passed as is
    assert (tmp_path / "ds_config.json").exists()


def rank_value(scale, *, offset=0.0):
    import sys

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    rank = dist.get_rank()
    dist.destroy_process_group()
    return {"rank": rank, "value": (rank + 1) * scale + offset, "total": total.item(), "argv": sys.argv[1:]}


def test_a_function_on_the_driver_returns_rank0s_value(spark_env):
    """PySpark's local mode returns the last rank's value; the config is not the function's (as in PySpark)."""
    result = DeepspeedTorchDistributor(numGpus=2, localMode=True, useGpu=False, deepspeedConfig=DS_CONFIG).run(
        rank_value, 10, offset=1.0
    )
    assert result["rank"] == 0 and result["value"] == 11.0 and result["total"] == 3.0
    assert "--deepspeed" not in result["argv"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"numGpus": 0}, r"numGpus must be a positive int, got 0"),
        ({"numGpus": 1.5}, r"numGpus must be a positive int"),
        ({"nnodes": True}, r"nnodes must be a positive int, got True"),
        ({"nnodes": -1}, r"nnodes must be a positive int"),
        ({"deepspeedConfig": 42}, r"deepspeedConfig must be the path .* a dict, or None, got int"),
        ({"deepspeedConfig": {"optimizer": {1, 2}}}, r"deepspeedConfig: a dict configuration must be JSON-serialis"),
        ({"num_processes": 2}, r"num_processes is not a DeepspeedTorchDistributor argument: pass numGpus \* nnodes"),
        ({"local_mode": False}, r"local_mode is not a DeepspeedTorchDistributor argument: pass localMode"),
    ],
)
def test_invalid_arguments_are_refused_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DeepspeedTorchDistributor(useGpu=False, **kwargs)


def test_a_script_takes_no_keyword_arguments(tmp_path):
    script = tmp_path / "train_ds.py"
    script.write_text(DEEPSPEED_SCRIPT)
    distributor = DeepspeedTorchDistributor(numGpus=2, useGpu=False, deepspeedConfig=DS_CONFIG)
    with pytest.raises(ValueError, match=r"doesn't support keyword arguments, got \['steps'\]"):
        distributor.run(str(script), steps=2)
    with pytest.raises(ValueError, match="no training script at"):
        distributor.run(str(tmp_path / "missing.py"))


def test_a_dict_configuration_is_written_for_the_script_and_removed_when_it_fails(tmp_path, monkeypatch):
    """What each rank runs (run_deepspeed_script), in this process: the file is gone even when the script raises."""
    script = tmp_path / "train_ds.py"
    script.write_text(
        "import json, sys\n"
        "config = sys.argv[sys.argv.index('--deepspeed_config') + 1]\n"
        "json.dump({'argv': sys.argv[1:], 'config': json.load(open(config))}, open(sys.argv[1], 'w'))\n"
        "raise SystemExit(3)\n"
    )
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    out = tmp_path / "seen.json"
    with pytest.raises(SystemExit, match="3"):
        run_deepspeed_script(str(script), [str(out), 5], DS_CONFIG)
    seen = json.loads(out.read_text())
    config = seen["argv"][-1]
    assert seen["argv"][:-1] == [str(out), "5", "--deepspeed", "--deepspeed_config"] and seen["config"] == DS_CONFIG
    assert os.path.dirname(config) == str(tmp_path) and not os.path.exists(config)
