"""The real stories260K model (../shared/testdata/models/stories260K-hf) must reproduce its
published greedy continuations exactly: the three prompts of its EXPECTED.md (64 tokens each,
ids and text) and karpathy's 256-step greedy run from BOS (expected_token_ids.derived.json).

usage: check_stories260k.py PAGODA_BINARY TESTDATA_DIR
Exits 0 with a SKIP line when the test data is absent.
"""
import json
import os
import re
import subprocess
import sys


def generate(binary, model, prompt, max_tokens):
    cmd = [binary, "generate", "--model", model, "--prompt", prompt, "--max-tokens", str(max_tokens),
           "--temperature", "0", "--ignore-eos", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    binary, testdata = sys.argv[1], sys.argv[2]
    model = os.path.join(testdata, "models", "stories260K-hf")
    expected_md = os.path.join(model, "EXPECTED.md")
    if not os.path.exists(expected_md):
        print(f"SKIP: {expected_md} not found (../shared/testdata is absent)")
        return
    text = open(expected_md, encoding="utf-8").read()
    cases = re.findall(
        r'## Prompt: `"(.*?)"`.*?generated_ids \(64\): `(\[.*?\])`.*?```\n(".*?")\n```', text, re.S)
    assert len(cases) == 3, f"expected 3 cases in EXPECTED.md, parsed {len(cases)}"
    ok = True
    for prompt, ids_text, full_text in cases:
        want_ids = json.loads(ids_text)
        want_text = json.loads(full_text)
        got = generate(binary, model, prompt, 64)
        same_ids = got["token_ids"] == want_ids
        same_text = prompt + got["text"] == want_text
        print(f"{'ok' if same_ids and same_text else 'FAIL'} {prompt!r}: ids {'equal' if same_ids else 'differ'}, "
              f"text {'equal' if same_text else 'differs'}")
        if not same_ids:
            print("  want", want_ids, "\n  got ", got["token_ids"])
        ok &= same_ids and same_text

    derived = json.load(open(os.path.join(testdata, "models", "stories260K", "expected_token_ids.derived.json")))
    want = derived["greedy_steps256"][1:]  # BOS, then 256 generated ids
    got = generate(binary, model, "", len(want))["token_ids"]
    same = got == want
    print(f"{'ok' if same else 'FAIL'} greedy 256 steps from BOS: {'equal' if same else 'differ'}")
    ok &= same
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
