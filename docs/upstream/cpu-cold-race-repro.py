"""Cold race against a running vLLM server (standard library only).

16 distinct random-token prompts of 1.3-1.9 blocks are sent at once, then each is resent
with 8 more tokens (a question: the same tokens on every server, so the resends are the
same prompts whatever the first answers were). Prints each resend's prefix-cache hit
(usage.prompt_tokens_details.cached_tokens) and, with --against (the JSON this script
wrote for another server, e.g. one with prefix caching off), which resent answers differ;
exits 1 when any does.

    python cpu-cold-race-repro.py --url http://127.0.0.1:8000 --out pc.json
    python cpu-cold-race-repro.py --url http://127.0.0.1:8001 --out control.json
    python cpu-cold-race-repro.py --url http://127.0.0.1:8000 --against control.json
"""

import argparse
import json
import random
import sys
import threading
import urllib.request


def complete(url, tokens, max_tokens):
    body = json.dumps({"model": "canary", "prompt": tokens, "max_tokens": max_tokens,
                       "temperature": 0, "return_token_ids": True, "logprobs": 2}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    choice = out["choices"][0]
    details = (out.get("usage") or {}).get("prompt_tokens_details") or {}
    # The top-1/top-2 logprob margin at each generated token: a difference where the
    # reference's margin is near 0 is a near-tie, not a wrong state.
    top = (choice.get("logprobs") or {}).get("top_logprobs") or []
    margins = []
    for t in top:
        best = sorted((t or {}).values(), reverse=True)
        margins.append(round(best[0] - best[1], 3) if len(best) > 1 else None)
    return choice.get("token_ids") or choice["text"], details.get("cached_tokens"), margins


def wave(url, prompts, max_tokens):
    """All prompts at once, one thread each: the engine sees them in one scheduling race."""
    res = [None] * len(prompts)

    def go(i):
        res[i] = complete(url, prompts[i], max_tokens)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--block", type=int, default=384, help="the engine's block, for the prompt lengths")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--vocab", type=int, default=500, help="token ids are drawn from [10, vocab)")
    ap.add_argument("--out")
    ap.add_argument("--against")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    prompts = [[rng.randrange(10, a.vocab) for _ in range(rng.randint(int(1.3 * a.block), int(1.9 * a.block)))]
               for _ in range(a.n)]
    first = wave(a.url, prompts, a.max_tokens)
    resend = [p + [rng.randrange(10, a.vocab) for _ in range(8)] for p in prompts]
    second = wave(a.url, resend, a.max_tokens)
    result = {"lens": [len(p) for p in prompts], "first": [f[0] for f in first],
              "second": [s[0] for s in second], "hits": [s[1] for s in second],
              "margins": [s[2] for s in second]}
    print("prompt lengths:", result["lens"])
    print("resend hits:   ", result["hits"])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f)
    if a.against:
        with open(a.against) as f:
            ref = json.load(f)
        cold = sum(ref["first"][i] != result["first"][i] for i in range(a.n))
        print(f"{cold} of {a.n} cold (first) answers differ from the reference")
        bad = [i for i in range(a.n) if ref["second"][i] != result["second"][i]]
        for i in bad:
            got, want = result["second"][i], ref["second"][i]
            at = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
            margin = ref["margins"][i][at] if at < len(ref["margins"][i]) else None
            print(f"resend {i} (prompt {result['lens'][i]} tokens, hit {result['hits'][i]}): "
                  f"differs at token {at}, reference top-1/top-2 margin {margin}")
            print(f"  got      {result['second'][i]}")
            print(f"  expected {ref['second'][i]}")
        print(f"{len(bad)} of {a.n} resent answers differ from the reference")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
