"""Is the Nemotron-H MTP head's low acceptance in the engine (1.4%, n1c-serves) the head, or
the engine? The builder reports the head right 39% of the time at 1.5k tokens, but against
the document's own answers (teacher-forced); the engine accepts a draft when it equals what
the target itself says, and this target recalls few answers. Here, on the CPU, in float32,
for documents drawn as build_canary.report draws them: the last answer greedy-decoded by the
target (the sequence the engine would produce), then the head's guess for token i+2 at every
answer position against (a) the document's answer, where the target was right so far, and
(b) the target's own decoded tokens: (b) is what vLLM's draft position 1 accepts, if vLLM
computes what the builder trained.

    python benchmarks/nemotronh-resume/mtp_probe.py BUILD_FOLDER SEED LENGTH COUNT   # torch + transformers
"""
import random
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "images" / "canary"))
import build_canary as shared  # the builders, by path, as the GPU calls run them
import build_nemotronh as b
import corpus

torch.set_num_threads(1)
folder, seed, length, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
out = Path(tempfile.mkdtemp())
tok = shared.build_tokenizer(out, seed, 1024)
args = SimpleNamespace(hidden=128, pattern="M-M-M-*-", state=128, mamba_heads=4, chunk=128, max_len=131072, decay="long")
torch.manual_seed(seed)
model, cfg = b.new_model(args, tok, -(-len(tok) // 64) * 64)
b.init_from(model, folder, out)
mtp = b._mtp_module()(cfg, seed)
weights = load_file(str(folder / "model.safetensors"))
mtp.load_state_dict({k[len("mtp."):]: v for k, v in weights.items() if k.startswith("mtp.")}, strict=True)
model.eval()
mtp.eval()
end = tok.convert_tokens_to_ids("<|im_end|>")
rng = random.Random(seed + 99 + length)
n = truth_ok = truth_n = self_ok = 0
for _ in range(count):
    doc = corpus.training_document(rng, corpus.lines_for(length), 4)
    ids, att, answer = shared.encode(tok, [doc], None)
    starts = [i for i in range(1, ids.shape[1]) if answer[0, i] and not answer[0, i - 1]]
    first = starts[-1]  # the last answer's first token; its prompt is everything before
    seq = ids[:, :first]
    with torch.no_grad():
        while seq.shape[1] < first + 40:
            nxt = model(input_ids=seq).logits[0, -1].argmax()
            seq = torch.cat([seq, nxt.view(1, 1)], dim=1)
            if int(nxt) == end:
                break
    with torch.no_grad():
        guess = shared._mtp_logits(model, mtp, seq, torch.ones_like(seq))[0, :-1].argmax(-1)  # token i+2
        guess_truth = shared._mtp_logits(model, mtp, ids, att)[0, :-1].argmax(-1)
    # (b): draft for every generated token after the first (position i+2 >= first + 1)
    for j in range(first + 1, seq.shape[1]):
        self_ok += int(guess[j - 2] == seq[0, j])
        n += 1
    # (a): the builder's own measure on this answer
    for j in range(first + 1, ids.shape[1]):
        if answer[0, j]:
            truth_ok += int(guess_truth[j - 2] == ids[0, j])
            truth_n += 1
    said = tok.decode(seq[0, first:]).replace("\n", " ")
    want = tok.decode(ids[0, first:]).replace("\n", " ")
    print(f"{'ok ' if said.strip() == want.strip() else 'bad'} {said[:60]!r} want {want[:60]!r}", flush=True)
print(f"L{length}: head vs the document's answers {truth_ok}/{truth_n} = {truth_ok / max(truth_n, 1):.3f}; "
      f"head vs the target's own decoded tokens {self_ok}/{n} = {self_ok / max(n, 1):.3f}")
