"""
The libraries people train with, unchanged, through ``TorchDistributor`` on a real local Spark, CPU and gloo:
a Transformers ``Trainer`` and a Lightning ``Trainer`` (``strategy="ddp"``), each as a script (np=2, one barrier task
per rank) and as a function (2 ranks on the driver). Neither script nor function calls ``report()``: the rank adds
its progress callback to the library's ``Trainer`` (:mod:`airflow_provider_horovod.runtime.library_progress`), and
the history, the snapshot and ``last_metrics`` fill as with ``report()``. ``HOROVOD_AIRFLOW_LIBRARY_PROGRESS=0``
switches that off. Accelerate with a plain ``Accelerator()`` the same two ways. (DeepSpeed: test_deepspeed.py.)
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_horovod.runtime import TorchDistributor

pytestmark = pytest.mark.spark

TRANSFORMERS_SCRIPT = '''
"""A Transformers Trainer script as it runs under torchrun: a tiny GPT-2 from a config (no download), synthetic data."""
import json
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

out = sys.argv[1]


class Numbers(torch.utils.data.Dataset):
    """64 sequences; remembers which of them this process read."""

    def __init__(self):
        self.seen = []

    def __len__(self):
        return 64

    def __getitem__(self, i):
        self.seen.append(i)
        ids = torch.tensor([(i * 7 + k) % 50 for k in range(8)])
        return {"input_ids": ids, "labels": ids}


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=8, n_embd=16, n_layer=1, n_head=2))
data = Numbers()
args = TrainingArguments(
    output_dir=os.path.join(out, "trainer"),
    per_device_train_batch_size=4,
    num_train_epochs=1,
    logging_steps=2,
    report_to=[],
    save_strategy="no",
    learning_rate=1e-3,
    disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=data)
result = trainer.train()
with open(os.path.join(out, f"transformers-{args.process_index}.json"), "w") as f:
    json.dump({"world_size": args.world_size, "seen": sorted(data.seen), "steps": result.global_step}, f)
'''

ACCELERATE_SCRIPT = """
import json, os, sys

import torch
from accelerate import Accelerator

accelerator = Accelerator()  # unchanged: no cpu=True, as a script written for GPUs reads
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
x = torch.full((8, 4), float(accelerator.process_index + 1))  # each process its own data
accelerator.backward(model(x).pow(2).mean())
optimizer.step()
weights = accelerator.unwrap_model(model).weight.detach().tolist()
with open(os.path.join(sys.argv[1], f"process{accelerator.process_index}.json"), "w") as f:
    json.dump({"num_processes": accelerator.num_processes, "type": str(accelerator.distributed_type),
               "weights": weights}, f)
"""

LIGHTNING_SCRIPT = '''
"""A Lightning script as it runs under torchrun: DDP on CPU, the Trainer's devices and num_nodes for the ranks."""
import json
import os
import sys

import lightning as L
import torch

out = sys.argv[1]


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


torch.manual_seed(0)
x = torch.randn(64, 4)
data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
trainer = L.Trainer(
    accelerator="cpu",
    devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    num_nodes=int(os.environ.get("WORLD_SIZE", "1")) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    strategy="ddp",
    max_epochs=2,
    log_every_n_steps=2,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    logger=False,
)
trainer.fit(Regression(), torch.utils.data.DataLoader(data, batch_size=8))
with open(os.path.join(out, f"lightning-{trainer.global_rank}.json"), "w") as f:
    json.dump({"world_size": trainer.world_size, "steps": trainer.global_step,
               "weight": trainer.lightning_module.layer.weight.tolist()}, f)
'''


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _ranks(out, library):
    return [json.loads((out / f"{library}-{rank}.json").read_text()) for rank in (0, 1)]


def _history(artifacts):
    return [json.loads(line) for line in (artifacts / "metrics.jsonl").read_text().splitlines()]


def run_script_as_function(path, out):
    """The same script, handed over as a function: ``run_path`` inside the rank, with its argument."""
    import runpy
    import sys

    sys.argv = [str(path), str(out)]
    runpy.run_path(str(path), run_name="__main__")
    return "done"


@pytest.fixture()
def dirs(tmp_path):
    out, artifacts = tmp_path / "out", tmp_path / "artifacts"
    out.mkdir()
    return out, artifacts


def test_a_transformers_trainer_script_trains_on_every_rank_and_reports_its_progress(spark, tmp_path, dirs):
    out, artifacts = dirs
    script = _write(tmp_path, "train_transformers.py", TRANSFORMERS_SCRIPT)
    distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, artifact_dir=str(artifacts))
    assert distributor.run(str(script), str(out)) is None
    ranks = _ranks(out, "transformers")
    assert [r["world_size"] for r in ranks] == [2, 2]  # not "rank 0 of 1" on each CPU-only rank
    assert [r["steps"] for r in ranks] == [8, 8]  # 64 samples, 4 per rank and step, 2 ranks
    assert not set(ranks[0]["seen"]) & set(ranks[1]["seen"])  # each rank its own shard
    assert sorted(ranks[0]["seen"] + ranks[1]["seen"]) == list(range(64))
    history = _history(artifacts)
    last = history[-1]
    assert (last["step"], last["total_steps"], last["epoch"]) == (8, 8, 0)
    assert any("loss" in r["metrics"] and "learning_rate" in r["metrics"] for r in history), history
    assert "train_runtime" in distributor.last_metrics  # the Trainer's summary, logged at the end
    snapshot = json.loads((artifacts / "progress.json").read_text())
    assert snapshot["state"] == "finished" and snapshot["percent"] == 100.0
    assert snapshot["ranks"]["1"]["step"] == 8  # the other rank's steps are reported too


def test_a_transformers_trainer_as_a_function_on_the_driver_reports_too(spark_env, tmp_path, dirs):
    out, artifacts = dirs
    script = _write(tmp_path, "train_transformers.py", TRANSFORMERS_SCRIPT)
    distributor = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False, artifact_dir=str(artifacts))
    assert distributor.run(run_script_as_function, script, out) == "done"
    assert [r["world_size"] for r in _ranks(out, "transformers")] == [2, 2]
    assert _history(artifacts)[-1]["step"] == 8 and "loss" in distributor.last_metrics


def test_a_lightning_ddp_script_trains_on_every_rank_and_reports_its_progress(spark, tmp_path, dirs):
    out, artifacts = dirs
    script = _write(tmp_path, "train_lightning.py", LIGHTNING_SCRIPT)
    distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False, artifact_dir=str(artifacts))
    distributor.run(str(script), str(out))
    ranks = _ranks(out, "lightning")
    assert [(r["world_size"], r["steps"]) for r in ranks] == [(2, 8), (2, 8)]  # 64 samples / 8 / 2 ranks, 2 epochs
    assert ranks[0]["weight"] == ranks[1]["weight"]  # DDP averaged the gradients: one model
    history = _history(artifacts)
    assert (history[-1]["step"], history[-1]["total_steps"], history[-1]["epoch"]) == (8, 8, 1)
    assert {r["epoch"] for r in history} == {0, 1}
    assert "train_loss" in distributor.last_metrics


def test_a_lightning_function_on_the_driver_reports_unless_switched_off(spark_env, tmp_path, dirs):
    out, artifacts = dirs
    script = _write(tmp_path, "train_lightning.py", LIGHTNING_SCRIPT)
    distributor = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False, artifact_dir=str(artifacts))
    assert distributor.run(run_script_as_function, script, out) == "done"
    assert [r["world_size"] for r in _ranks(out, "lightning")] == [2, 2]
    assert _history(artifacts)[-1]["step"] == 8 and "train_loss" in distributor.last_metrics

    quiet = tmp_path / "quiet"
    off = TorchDistributor(
        num_processes=2,
        local_mode=True,
        use_gpu=False,
        artifact_dir=str(quiet),
        env={"HOROVOD_AIRFLOW_LIBRARY_PROGRESS": "0"},
    )
    assert off.run(run_script_as_function, script, out) == "done"
    assert not (quiet / "metrics.jsonl").exists() or not _history(quiet)
    assert off.last_metrics == {}


def test_an_unchanged_accelerate_script_trains_with_every_rank_on_cpu(spark_env, tmp_path):
    """
    Under torchrun on CPU this script runs each process alone ("rank 0 of 1") while the gloo group has 2: the launcher
    tells CPU-only ranks ``ACCELERATE_USE_CPU=true``, so Accelerate sees both processes and averages the gradients.
    """
    script = _write(tmp_path, "train_accelerate.py", ACCELERATE_SCRIPT)
    TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(str(script), str(tmp_path))
    runs = [json.loads((tmp_path / f"process{i}.json").read_text()) for i in (0, 1)]
    assert [(r["num_processes"], r["type"]) for r in runs] == [(2, "DistributedType.MULTI_CPU")] * 2
    assert runs[0]["weights"] == runs[1]["weights"]  # one model: the two processes' gradients were averaged


def test_an_accelerate_function_on_barrier_tasks_trains_with_every_rank(spark, tmp_path, dirs):
    out, _artifacts = dirs
    script = _write(tmp_path, "train_accelerate.py", ACCELERATE_SCRIPT)
    distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
    assert distributor.run(run_script_as_function, script, out) == "done"
    runs = [json.loads((out / f"process{i}.json").read_text()) for i in (0, 1)]
    assert [(r["num_processes"], r["type"]) for r in runs] == [(2, "DistributedType.MULTI_CPU")] * 2
    assert runs[0]["weights"] == runs[1]["weights"]
