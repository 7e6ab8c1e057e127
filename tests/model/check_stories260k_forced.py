"""stories260K's published greedy continuations, checked through the model alone (dump_logits),
for builds that have no CLI or engine: the cross build run under qemu (scripts/qemu-model-tests.sh).

Greedy decoding reproduces a continuation exactly if and only if, fed the expected tokens one
per step, the model's argmax at every step is the next expected token: this is what runs here,
token by token through the KV cache as in decode. The cases are those of check_stories260k.py:
the three prompts of EXPECTED.md (prompt ids with BOS, 64 generated ids each) and karpathy's
256-step greedy run from BOS. The text is not checked here: detokenizing is the tokenizer's and
check_stories260k.py holds it on the native build.

usage: check_stories260k_forced.py DUMP_LOGITS_COMMAND TESTDATA_DIR WORK_DIR
DUMP_LOGITS_COMMAND may be several words (an emulator before the binary).
Exits 0 with a SKIP line when the test data is absent.
"""
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np


def greedy_choices(command, model, ids, out_path):
    """The argmax after each of ids[:-1], fed one token per step."""
    subprocess.run(command + [model, out_path, "decode", ",".join(map(str, ids[:-1]))], check=True)
    logits = np.fromfile(out_path, dtype=np.float32)
    rows = logits.reshape(len(ids) - 1, -1)
    return rows.argmax(axis=1).tolist(), rows


def check(name, command, model, prompt_ids, want, work):
    ids = prompt_ids + want
    choices, rows = greedy_choices(command, model, ids, os.path.join(work, "logits.bin"))
    got = choices[len(prompt_ids) - 1:]
    if got == want:
        print(f"ok {name}: {len(want)} greedy choices equal")
        return True
    step = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    row = rows[len(prompt_ids) - 1 + step]
    print(f"FAIL {name}: first differs at generated step {step}: want {want[step]} "
          f"(logit {row[want[step]]:.5f}), got {got[step]} (logit {row[got[step]]:.5f})")
    return False


def main():
    command, testdata, work = shlex.split(sys.argv[1]), sys.argv[2], sys.argv[3]
    model = os.path.join(testdata, "models", "stories260K-hf")
    expected_md = os.path.join(model, "EXPECTED.md")
    if not os.path.exists(expected_md):
        print(f"SKIP: {expected_md} not found (../shared/testdata is absent)")
        return
    os.makedirs(work, exist_ok=True)
    text = open(expected_md, encoding="utf-8").read()
    cases = re.findall(r'## Prompt: `"(.*?)"`.*?prompt_ids \(with BOS\): `(\[.*?\])`'
                       r'.*?generated_ids \(64\): `(\[.*?\])`', text, re.S)
    assert len(cases) == 3, f"expected 3 cases in EXPECTED.md, parsed {len(cases)}"
    ok = True
    for prompt, prompt_ids, generated in cases:
        ok &= check(repr(prompt), command, model, json.loads(prompt_ids), json.loads(generated), work)

    derived = json.load(open(os.path.join(testdata, "models", "stories260K", "expected_token_ids.derived.json")))
    steps = derived["greedy_steps256"]  # BOS, then 256 generated ids
    ok &= check("greedy 256 steps from BOS", command, model, steps[:1], steps[1:], work)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
