"""
B13's training script: a Transformers ``Trainer`` on a small GPT-2, run unchanged by every contender as ``__main__``
(this provider's ``TorchDistributor(...).run(path, out_dir, ...)`` and ``torchrun --standalone --nproc_per_node=2
path out_dir ...``); only the launcher differs.

``python trainer_throughput.py OUT_DIR [--warmup-steps N] [--steps N] [--batch-size N]``: a GPT-2 built from a
config (no download), a synthetic in-memory dataset, ``warmup`` untimed optimizer steps then ``steps`` timed ones
(timed by a ``TrainerCallback``: the end of step ``warmup`` to the end of the last step, each after a barrier).
Rank 0 writes ``OUT_DIR/result.json``: global samples/s (timed steps x batch per rank x world size / seconds), the
world size, rank 0's torch threads, and whether a progress callback of this provider's launcher was on the
``Trainer``.

It lives in a folder of its own: a script's folder comes first on ``sys.path``, and ``benchmarks/profile.py`` would
shadow the standard library's ``profile`` (which Transformers imports).
"""

from __future__ import annotations

import argparse
import json
import os
import time

SEQ_LEN, VOCAB, SAMPLES = 32, 512, 4096
RESULT = "result.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=64, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config)
    tokens = torch.randint(0, VOCAB, (SAMPLES, SEQ_LEN), generator=torch.Generator().manual_seed(0))

    class Synthetic(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return SAMPLES

        def __getitem__(self, i: int) -> dict:
            return {"input_ids": tokens[i], "labels": tokens[i]}

    marks: dict[int, float] = {}
    last = args.warmup_steps + args.steps

    class Timing(TrainerCallback):
        """Wall time at the end of step ``warmup`` and of the last step, each after a barrier (all ranks there)."""

        def on_step_end(self, targs, state, control, **kwargs) -> None:
            if state.global_step in (args.warmup_steps, last):
                if torch.distributed.is_initialized():
                    torch.distributed.barrier()
                marks[state.global_step] = time.perf_counter()

    training_args = TrainingArguments(
        output_dir=os.path.join(args.out_dir, "trainer"),
        per_device_train_batch_size=args.batch_size,
        max_steps=last,
        learning_rate=1e-3,
        logging_steps=10,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,  # the model uses every parameter: no extra autograd traversal per step
        seed=0,
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=Synthetic(), callbacks=[Timing()])
    progress = any(
        getattr(type(c), "_airflow_provider_horovod_progress", False) for c in trainer.callback_handler.callbacks
    )
    trainer.train()
    world = training_args.world_size
    if training_args.process_index == 0:
        seconds = marks[last] - marks[args.warmup_steps]
        result = {
            "samples_per_s": args.steps * args.batch_size * world / seconds,
            "world_size": world,
            "seconds": seconds,
            "progress_callback": progress,
            "torch_threads": torch.get_num_threads(),
        }
        with open(os.path.join(args.out_dir, RESULT), "w") as f:
            json.dump(result, f)
    if torch.distributed.is_initialized():
        # torch's advice for every script: a process exiting with its process group alive may abort at exit
        # ("terminate called without an active exception"), which failed one bare torchrun run of B13
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
