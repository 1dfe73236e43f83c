"""Reproducer for vmatrix cell 6e69676287f4ef70 (vllm 0.26.0), written by `vmatrix repro`.

Standard library only: run it with the python of a venv that holds vLLM (or point
--vllm-python / --vllm at one). It starts the engine with the control's flags, replays the
requests below, stops it; then starts it with the cell's flags --runs times (default 3) and
replays the same requests each time; it compares every answer with the control's token by
token (up to and including the control's first end-of-turn token) and prints what differs.
Exit status: 1 when at least --k runs (default 1) differ at a clear margin (reproduced),
0 when not, 125 when an engine did not start or a request failed (not tested).

Release:  vllm==0.26.0   (pip install vllm==0.26.0)
Patches:  none (a stock release)
Model:    canary:tiny-qwen3next (recorded at /work/main/images/canary/shipped/tiny-qwen3next); --model takes the folder
Cell:     --served-model-name canary --host 127.0.0.1 --seed 0 --max-model-len 16384 --enable-prompt-tokens-details --enforce-eager --enable-prefix-caching --speculative-config '{"method": "mtp", "num_speculative_tokens": 3}' --dtype bfloat16 --max-num-batched-tokens 256 --max-num-seqs 16 --gdn-prefill-backend triton
Control:  --served-model-name canary --host 127.0.0.1 --seed 0 --max-model-len 16384 --enable-prompt-tokens-details --enforce-eager --no-enable-prefix-caching --dtype bfloat16 --max-num-batched-tokens 256 --max-num-seqs 16 --gdn-prefill-backend triton
Env:      HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
Requests: 130 in 15 phase(s) of 16, 16, 16, 16, 16, 16, 6, 6, 4, 4, 4, 1, 1, 4, 4, each phase's sent at once, to /v1/chat/completions;
          {"max_tokens": 24, "temperature": 0, "seed": 0, "ignore_eos": true, "return_tokens_as_token_ids": true}, stream, top 2 logprobs
Ties:     a first difference where the control's top-2 margin is <= 0.25 is a near-tie
          flip, printed but not counted

What vmatrix saw (run 19): corrupt; 3 of 3 graded run(s) of this cell `corrupt`.
  3/130 requests differ at a clear margin; first at session cold_race.13 turn 1 token 6, control margin 17.28
  first difference: cold_race.13/1 token 6 (control margin 17.28)
    cell:    'var_206106 = build build result write = zeta test run build =42'
    control: 'var_2061 = engine epsilon layer search write8 path zeta state search theta = layer close alpha'

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
RELEASE = 'vllm 0.26.0'
MODEL = '/work/main/images/canary/shipped/tiny-qwen3next'
SERVED_NAME = 'canary'
CELL_FLAGS: list[str] = ['--served-model-name', 'canary', '--host', '127.0.0.1', '--seed', '0', '--max-model-len', '16384',
 '--enable-prompt-tokens-details', '--enforce-eager', '--enable-prefix-caching', '--speculative-config',
 '{"method": "mtp", "num_speculative_tokens": 3}', '--dtype', 'bfloat16', '--max-num-batched-tokens', '256',
 '--max-num-seqs', '16', '--gdn-prefill-backend', 'triton']
CONTROL_FLAGS: list[str] = ['--served-model-name', 'canary', '--host', '127.0.0.1', '--seed', '0', '--max-model-len', '16384',
 '--enable-prompt-tokens-details', '--enforce-eager', '--no-enable-prefix-caching', '--dtype', 'bfloat16',
 '--max-num-batched-tokens', '256', '--max-num-seqs', '16', '--gdn-prefill-backend', 'triton']
ENGINE_ENV: dict[str, str] = {'HF_HUB_OFFLINE': '1', 'TRANSFORMERS_OFFLINE': '1', 'VLLM_NO_USAGE_STATS': '1', 'PYTHONUNBUFFERED': '1'}
API = 'chat'
SAMPLING: dict = {'max_tokens': 24, 'temperature': 0, 'seed': 0, 'ignore_eos': True, 'return_tokens_as_token_ids': True}
TOP_LOGPROBS = 2
TIE_MARGIN = 0.25
PHASES: list[dict] = [{'name': 'cold_race/cold',
  'requests': [{'key': 'cold_race.0/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7543 = open sigma result value value\n'
                                         'var_7914 = session read gamma query\n'
                                         'var_9779 = path zeta result\n'
                                         'var_5188 = search beta close check gamma\n'
                                         'var_2195 = state file cache beta\n'
                                         'var_2414 = search path run state\n'
                                         'var_9080 = token token path value omega omega'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_5188'}]},
               {'key': 'cold_race.1/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3092 = value token search omega error\n'
                                         'var_1604 = query omega write sigma alpha search\n'
                                         'var_9707 = open query agent search engine\n'
                                         'var_0248 = result value beta theta read result\n'
                                         'var_2371 = open cache build omega lambda query\n'
                                         'var_0972 = kappa kappa cache state omega open\n'
                                         'var_2106 = alpha search error path run state'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_2371'}]},
               {'key': 'cold_race.2/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_5812 = agent file result read cache test\n'
                                         'var_3555 = list build open close zeta omega\n'
                                         'var_6396 = state run kappa list\n'
                                         'var_8919 = block zeta file read\n'
                                         'var_6567 = engine alpha delta theta dict\n'
                                         'var_1975 = write search beta write engine lambda\n'
                                         'var_9036 = sigma value theta engine dict query\n'
                                         'var_0447 = state run zeta'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_6567'}]},
               {'key': 'cold_race.3/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_5858 = result close check alpha value gamma\n'
                                         'var_6772 = zeta error search theta theta\n'
                                         'var_7795 = epsilon theta read test close\n'
                                         'var_5788 = sigma result zeta\n'
                                         'var_7750 = path query result write\n'
                                         'var_3128 = agent block value list layer gamma\n'
                                         'var_2594 = state error path open read\n'
                                         'var_7459 = file gamma query\n'
                                         'var_8629 = epsilon session alpha token'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_7750'}]},
               {'key': 'cold_race.4/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_5982 = epsilon sigma build session\n'
                                         'var_7819 = session engine read dict cache kappa\n'
                                         'var_2530 = error error file alpha sigma token\n'
                                         'var_0904 = value session error zeta layer build\n'
                                         'var_9384 = close path write omega block gamma\n'
                                         'var_8998 = epsilon layer omega kappa session\n'
                                         'var_0446 = epsilon write query state read check\n'
                                         'var_0418 = run list token open file read\n'
                                         'var_8105 = result sigma token theta dict'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_8998'}]},
               {'key': 'cold_race.5/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4561 = layer query zeta path\n'
                                         'var_7143 = build error run engine\n'
                                         'var_0167 = close error token engine block path\n'
                                         'var_0366 = theta result read build state engine\n'
                                         'var_3892 = search layer zeta\n'
                                         'var_4230 = omega read query gamma error beta\n'
                                         'var_8586 = value theta epsilon alpha\n'
                                         'var_7027 = file list read file list\n'
                                         'var_8785 = gamma cache close kappa lambda path\n'
                                         'var_6645 = value state gamma path open token'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_4230'}]},
               {'key': 'cold_race.6/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_1414 = epsilon close search beta value agent\n'
                                         'var_0053 = block write file alpha read run\n'
                                         'var_2330 = lambda epsilon theta run cache error\n'
                                         'var_9662 = kappa dict lambda cache dict gamma\n'
                                         'var_8757 = value read value list beta list\n'
                                         'var_1119 = gamma session check sigma session epsilon\n'
                                         'var_1598 = path alpha engine kappa zeta build\n'
                                         'var_5970 = close token theta zeta cache path\n'
                                         'var_2667 = error read open write result\n'
                                         'var_3279 = delta kappa kappa state close test'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_1119'}]},
               {'key': 'cold_race.7/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_2657 = dict run alpha check gamma block\n'
                                         'var_9798 = test kappa write alpha theta result\n'
                                         'var_5785 = build alpha kappa query build query\n'
                                         'var_9236 = engine agent session read error write\n'
                                         'var_6874 = epsilon error beta check lambda\n'
                                         'var_4973 = engine lambda alpha build engine state\n'
                                         'var_3837 = dict gamma list error delta cache\n'
                                         'var_0695 = layer file open list\n'
                                         'var_7165 = alpha kappa write sigma zeta cache\n'
                                         'var_8847 = agent gamma kappa lambda\n'
                                         'var_7966 = session layer test file open'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_3837'}]},
               {'key': 'cold_race.8/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3267 = error kappa cache\n'
                                         'var_3216 = dict zeta dict check delta\n'
                                         'var_9170 = agent test sigma lambda\n'
                                         'var_5968 = list kappa zeta agent file\n'
                                         'var_2703 = agent path epsilon delta list state\n'
                                         'var_3822 = engine path token dict session session\n'
                                         'var_4359 = cache block layer token close dict\n'
                                         'var_4459 = path check layer list close\n'
                                         'var_5462 = error test cache beta engine\n'
                                         'var_8243 = alpha query epsilon delta\n'
                                         'var_8365 = list kappa check zeta path run\n'
                                         'var_1409 = layer list session file open'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_4359'}]},
               {'key': 'cold_race.9/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7800 = engine build list test layer result\n'
                                         'var_7041 = delta agent check result search run\n'
                                         'var_1287 = epsilon value run state\n'
                                         'var_8178 = result alpha kappa block check sigma\n'
                                         'var_0488 = file kappa file alpha path\n'
                                         'var_1209 = check theta gamma query search open\n'
                                         'var_4915 = error check open read state check\n'
                                         'var_0118 = run state delta close alpha query\n'
                                         'var_5511 = search dict list kappa value query\n'
                                         'var_6884 = delta error cache read build dict\n'
                                         'var_4768 = path block read check alpha value\n'
                                         'var_8368 = layer engine agent agent lambda layer'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_4915'}]},
               {'key': 'cold_race.10/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_5189 = value error state\n'
                                         'var_2160 = result beta list alpha alpha session\n'
                                         'var_4022 = close session block sigma path build\n'
                                         'var_5664 = path delta sigma close file token\n'
                                         'var_7710 = zeta layer file token search token\n'
                                         'var_5243 = kappa open list gamma write beta\n'
                                         'var_1771 = error sigma state theta result\n'
                                         'var_7355 = close gamma theta run state agent\n'
                                         'var_9762 = layer epsilon token build path result\n'
                                         'var_0499 = close alpha value write\n'
                                         'var_1662 = open session sigma state beta\n'
                                         'var_7054 = lambda build open list alpha\n'
                                         'var_0879 = alpha read state beta run gamma'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_7355'}]},
               {'key': 'cold_race.11/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0303 = sigma search zeta open kappa value\n'
                                         'var_4438 = file lambda run build engine search\n'
                                         'var_0335 = engine result gamma build gamma cache\n'
                                         'var_6631 = open value theta result test omega\n'
                                         'var_2981 = result query read file engine test\n'
                                         'var_0268 = layer close build search run query\n'
                                         'var_0655 = engine result session state engine engine\n'
                                         'var_2087 = run agent result kappa value lambda\n'
                                         'var_9441 = block omega engine block zeta alpha\n'
                                         'var_8735 = zeta path zeta theta session search\n'
                                         'var_2361 = path delta zeta gamma omega kappa\n'
                                         'var_5302 = result session block dict run state\n'
                                         'var_9672 = cache error theta result epsilon dict'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_2087'}]},
               {'key': 'cold_race.12/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7230 = query session cache lambda epsilon check\n'
                                         'var_7218 = session list error omega dict agent\n'
                                         'var_2421 = path gamma file path alpha agent\n'
                                         'var_3305 = theta list build read check layer\n'
                                         'var_7731 = read engine agent engine build check\n'
                                         'var_8624 = search beta build read\n'
                                         'var_7778 = test engine beta alpha read close\n'
                                         'var_3031 = run open zeta read\n'
                                         'var_7119 = write zeta search open layer engine\n'
                                         'var_6818 = build beta agent close gamma\n'
                                         'var_7812 = session write write list cache token\n'
                                         'var_5447 = write theta test build read check\n'
                                         'var_8933 = result alpha theta file layer alpha\n'
                                         'var_4672 = kappa omega lambda cache zeta result'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_3031'}]},
               {'key': 'cold_race.13/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_6824 = cache cache file path open layer\n'
                                         'var_8929 = zeta layer kappa alpha zeta\n'
                                         'var_4840 = state run alpha write query gamma\n'
                                         'var_6230 = error beta search value result write\n'
                                         'var_1325 = check alpha file run\n'
                                         'var_3788 = open build close lambda\n'
                                         'var_5782 = beta value list search\n'
                                         'var_2061 = engine epsilon layer search write\n'
                                         'var_8135 = query lambda check block search theta\n'
                                         'var_6119 = theta block zeta check close\n'
                                         'var_6522 = session epsilon omega sigma omega omega\n'
                                         'var_9054 = sigma dict block check lambda\n'
                                         'var_4713 = state theta session kappa run close\n'
                                         'var_0795 = value read zeta omega run build\n'
                                         'var_8028 = alpha layer omega write close block'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_8135'}]},
               {'key': 'cold_race.14/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4422 = session lambda run test state session\n'
                                         'var_2539 = file build value read session beta\n'
                                         'var_2953 = zeta read write beta engine value\n'
                                         'var_1002 = gamma layer open write build zeta\n'
                                         'var_0556 = dict token lambda layer cache dict\n'
                                         'var_9009 = session block zeta zeta omega read\n'
                                         'var_6749 = token zeta file file block state\n'
                                         'var_6649 = kappa omega beta zeta test alpha\n'
                                         'var_0409 = layer file alpha alpha kappa file\n'
                                         'var_5780 = test beta search read token sigma\n'
                                         'var_6871 = block state dict session run close\n'
                                         'var_1534 = build sigma omega dict close\n'
                                         'var_1840 = zeta agent list epsilon token close\n'
                                         'var_6064 = close theta search beta session\n'
                                         'var_4231 = query dict epsilon gamma open file'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_0409'}]},
               {'key': 'cold_race.15/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_6937 = epsilon engine beta omega check\n'
                                         'var_1385 = sigma state query engine list session\n'
                                         'var_4621 = omega sigma file open read test\n'
                                         'var_3301 = gamma file lambda query gamma\n'
                                         'var_6385 = path file read lambda cache error\n'
                                         'var_2863 = delta gamma build sigma gamma\n'
                                         'var_0079 = epsilon check agent check close list\n'
                                         'var_5323 = omega epsilon file search test read\n'
                                         'var_0340 = path layer theta error run agent\n'
                                         'var_4208 = close search run open read\n'
                                         'var_7034 = delta alpha zeta lambda result session\n'
                                         'var_2389 = value epsilon sigma test theta path\n'
                                         'var_9527 = session token value test run\n'
                                         'var_7199 = kappa session query file\n'
                                         'var_8639 = error alpha alpha search agent beta\n'
                                         'var_6160 = test lambda zeta cache alpha value'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_0340'}]}]},
 {'name': 'cold_race/resend',
  'requests': [{'key': 'cold_race.0/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7543 = open sigma result value value\n'
                                         'var_7914 = session read gamma query\n'
                                         'var_9779 = path zeta result\n'
                                         'var_5188 = search beta close check gamma\n'
                                         'var_2195 = state file cache beta\n'
                                         'var_2414 = search path run state\n'
                                         'var_9080 = token token path value omega omega'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_5188'},
                             {'role': 'assistant', 'content': 'var_5188 = search beta close check gamma'},
                             {'role': 'user', 'content': 'turn 1: read_file then show var_9779'}]},
               {'key': 'cold_race.1/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3092 = value token search omega error\n'
                                         'var_1604 = query omega write sigma alpha search\n'
                                         'var_9707 = open query agent search engine\n'
                                         'var_0248 = result value beta theta read result\n'
                                         'var_2371 = open cache build omega lambda query\n'
                                         'var_0972 = kappa kappa cache state omega open\n'
                                         'var_2106 = alpha search error path run state'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_2371'},
                             {'role': 'assistant',
                              'content': 'var_2371 = open cache build omega lambda query'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_2106'}]},
               {'key': 'cold_race.2/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_5812 = agent file result read cache test\n'
                                         'var_3555 = list build open close zeta omega\n'
                                         'var_6396 = state run kappa list\n'
                                         'var_8919 = block zeta file read\n'
                                         'var_6567 = engine alpha delta theta dict\n'
                                         'var_1975 = write search beta write engine lambda\n'
                                         'var_9036 = sigma value theta engine dict query\n'
                                         'var_0447 = state run zeta'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_6567'},
                             {'role': 'assistant', 'content': 'var_6567 = engine alpha delta theta dict'},
                             {'role': 'user', 'content': 'turn 1: read_file then show var_0447'}]},
               {'key': 'cold_race.3/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_5858 = result close check alpha value gamma\n'
                                         'var_6772 = zeta error search theta theta\n'
                                         'var_7795 = epsilon theta read test close\n'
                                         'var_5788 = sigma result zeta\n'
                                         'var_7750 = path query result write\n'
                                         'var_3128 = agent block value list layer gamma\n'
                                         'var_2594 = state error path open read\n'
                                         'var_7459 = file gamma query\n'
                                         'var_8629 = epsilon session alpha token'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_7750'},
                             {'role': 'assistant', 'content': 'var_7750 = path query result write'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_7459'}]},
               {'key': 'cold_race.4/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_5982 = epsilon sigma build session\n'
                                         'var_7819 = session engine read dict cache kappa\n'
                                         'var_2530 = error error file alpha sigma token\n'
                                         'var_0904 = value session error zeta layer build\n'
                                         'var_9384 = close path write omega block gamma\n'
                                         'var_8998 = epsilon layer omega kappa session\n'
                                         'var_0446 = epsilon write query state read check\n'
                                         'var_0418 = run list token open file read\n'
                                         'var_8105 = result sigma token theta dict'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_8998'},
                             {'role': 'assistant', 'content': 'var_8998 = epsilon layer omega kappa session'},
                             {'role': 'user', 'content': 'turn 1: list_dir then show var_0418'}]},
               {'key': 'cold_race.5/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4561 = layer query zeta path\n'
                                         'var_7143 = build error run engine\n'
                                         'var_0167 = close error token engine block path\n'
                                         'var_0366 = theta result read build state engine\n'
                                         'var_3892 = search layer zeta\n'
                                         'var_4230 = omega read query gamma error beta\n'
                                         'var_8586 = value theta epsilon alpha\n'
                                         'var_7027 = file list read file list\n'
                                         'var_8785 = gamma cache close kappa lambda path\n'
                                         'var_6645 = value state gamma path open token'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_4230'},
                             {'role': 'assistant', 'content': 'var_4230 = omega read query gamma error beta'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_6645'}]},
               {'key': 'cold_race.6/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_1414 = epsilon close search beta value agent\n'
                                         'var_0053 = block write file alpha read run\n'
                                         'var_2330 = lambda epsilon theta run cache error\n'
                                         'var_9662 = kappa dict lambda cache dict gamma\n'
                                         'var_8757 = value read value list beta list\n'
                                         'var_1119 = gamma session check sigma session epsilon\n'
                                         'var_1598 = path alpha engine kappa zeta build\n'
                                         'var_5970 = close token theta zeta cache path\n'
                                         'var_2667 = error read open write result\n'
                                         'var_3279 = delta kappa kappa state close test'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_1119'},
                             {'role': 'assistant',
                              'content': 'var_1119 = gamma session check sigma session epsilon'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_1598'}]},
               {'key': 'cold_race.7/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_2657 = dict run alpha check gamma block\n'
                                         'var_9798 = test kappa write alpha theta result\n'
                                         'var_5785 = build alpha kappa query build query\n'
                                         'var_9236 = engine agent session read error write\n'
                                         'var_6874 = epsilon error beta check lambda\n'
                                         'var_4973 = engine lambda alpha build engine state\n'
                                         'var_3837 = dict gamma list error delta cache\n'
                                         'var_0695 = layer file open list\n'
                                         'var_7165 = alpha kappa write sigma zeta cache\n'
                                         'var_8847 = agent gamma kappa lambda\n'
                                         'var_7966 = session layer test file open'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_3837'},
                             {'role': 'assistant', 'content': 'var_3837 = dict gamma list error delta cache'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_0695'}]},
               {'key': 'cold_race.8/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3267 = error kappa cache\n'
                                         'var_3216 = dict zeta dict check delta\n'
                                         'var_9170 = agent test sigma lambda\n'
                                         'var_5968 = list kappa zeta agent file\n'
                                         'var_2703 = agent path epsilon delta list state\n'
                                         'var_3822 = engine path token dict session session\n'
                                         'var_4359 = cache block layer token close dict\n'
                                         'var_4459 = path check layer list close\n'
                                         'var_5462 = error test cache beta engine\n'
                                         'var_8243 = alpha query epsilon delta\n'
                                         'var_8365 = list kappa check zeta path run\n'
                                         'var_1409 = layer list session file open'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_4359'},
                             {'role': 'assistant',
                              'content': 'var_4359 = cache block layer token close dict'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_8243'}]},
               {'key': 'cold_race.9/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7800 = engine build list test layer result\n'
                                         'var_7041 = delta agent check result search run\n'
                                         'var_1287 = epsilon value run state\n'
                                         'var_8178 = result alpha kappa block check sigma\n'
                                         'var_0488 = file kappa file alpha path\n'
                                         'var_1209 = check theta gamma query search open\n'
                                         'var_4915 = error check open read state check\n'
                                         'var_0118 = run state delta close alpha query\n'
                                         'var_5511 = search dict list kappa value query\n'
                                         'var_6884 = delta error cache read build dict\n'
                                         'var_4768 = path block read check alpha value\n'
                                         'var_8368 = layer engine agent agent lambda layer'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_4915'},
                             {'role': 'assistant', 'content': 'var_4915 = error check open read state check'},
                             {'role': 'user', 'content': 'turn 1: git_diff then show var_7800'}]},
               {'key': 'cold_race.10/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_5189 = value error state\n'
                                         'var_2160 = result beta list alpha alpha session\n'
                                         'var_4022 = close session block sigma path build\n'
                                         'var_5664 = path delta sigma close file token\n'
                                         'var_7710 = zeta layer file token search token\n'
                                         'var_5243 = kappa open list gamma write beta\n'
                                         'var_1771 = error sigma state theta result\n'
                                         'var_7355 = close gamma theta run state agent\n'
                                         'var_9762 = layer epsilon token build path result\n'
                                         'var_0499 = close alpha value write\n'
                                         'var_1662 = open session sigma state beta\n'
                                         'var_7054 = lambda build open list alpha\n'
                                         'var_0879 = alpha read state beta run gamma'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_7355'},
                             {'role': 'assistant', 'content': 'var_7355 = close gamma theta run state agent'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_1771'}]},
               {'key': 'cold_race.11/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0303 = sigma search zeta open kappa value\n'
                                         'var_4438 = file lambda run build engine search\n'
                                         'var_0335 = engine result gamma build gamma cache\n'
                                         'var_6631 = open value theta result test omega\n'
                                         'var_2981 = result query read file engine test\n'
                                         'var_0268 = layer close build search run query\n'
                                         'var_0655 = engine result session state engine engine\n'
                                         'var_2087 = run agent result kappa value lambda\n'
                                         'var_9441 = block omega engine block zeta alpha\n'
                                         'var_8735 = zeta path zeta theta session search\n'
                                         'var_2361 = path delta zeta gamma omega kappa\n'
                                         'var_5302 = result session block dict run state\n'
                                         'var_9672 = cache error theta result epsilon dict'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_2087'},
                             {'role': 'assistant',
                              'content': 'var_2087 = run agent result kappa value lambda'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_2361'}]},
               {'key': 'cold_race.12/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7230 = query session cache lambda epsilon check\n'
                                         'var_7218 = session list error omega dict agent\n'
                                         'var_2421 = path gamma file path alpha agent\n'
                                         'var_3305 = theta list build read check layer\n'
                                         'var_7731 = read engine agent engine build check\n'
                                         'var_8624 = search beta build read\n'
                                         'var_7778 = test engine beta alpha read close\n'
                                         'var_3031 = run open zeta read\n'
                                         'var_7119 = write zeta search open layer engine\n'
                                         'var_6818 = build beta agent close gamma\n'
                                         'var_7812 = session write write list cache token\n'
                                         'var_5447 = write theta test build read check\n'
                                         'var_8933 = result alpha theta file layer alpha\n'
                                         'var_4672 = kappa omega lambda cache zeta result'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_3031'},
                             {'role': 'assistant', 'content': 'var_3031 = run open zeta read'},
                             {'role': 'user', 'content': 'turn 1: read_file then show var_8624'}]},
               {'key': 'cold_race.13/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_6824 = cache cache file path open layer\n'
                                         'var_8929 = zeta layer kappa alpha zeta\n'
                                         'var_4840 = state run alpha write query gamma\n'
                                         'var_6230 = error beta search value result write\n'
                                         'var_1325 = check alpha file run\n'
                                         'var_3788 = open build close lambda\n'
                                         'var_5782 = beta value list search\n'
                                         'var_2061 = engine epsilon layer search write\n'
                                         'var_8135 = query lambda check block search theta\n'
                                         'var_6119 = theta block zeta check close\n'
                                         'var_6522 = session epsilon omega sigma omega omega\n'
                                         'var_9054 = sigma dict block check lambda\n'
                                         'var_4713 = state theta session kappa run close\n'
                                         'var_0795 = value read zeta omega run build\n'
                                         'var_8028 = alpha layer omega write close block'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_8135'},
                             {'role': 'assistant',
                              'content': 'var_8135 = query lambda check block search theta'},
                             {'role': 'user', 'content': 'turn 1: list_dir then show var_2061'}]},
               {'key': 'cold_race.14/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4422 = session lambda run test state session\n'
                                         'var_2539 = file build value read session beta\n'
                                         'var_2953 = zeta read write beta engine value\n'
                                         'var_1002 = gamma layer open write build zeta\n'
                                         'var_0556 = dict token lambda layer cache dict\n'
                                         'var_9009 = session block zeta zeta omega read\n'
                                         'var_6749 = token zeta file file block state\n'
                                         'var_6649 = kappa omega beta zeta test alpha\n'
                                         'var_0409 = layer file alpha alpha kappa file\n'
                                         'var_5780 = test beta search read token sigma\n'
                                         'var_6871 = block state dict session run close\n'
                                         'var_1534 = build sigma omega dict close\n'
                                         'var_1840 = zeta agent list epsilon token close\n'
                                         'var_6064 = close theta search beta session\n'
                                         'var_4231 = query dict epsilon gamma open file'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_0409'},
                             {'role': 'assistant', 'content': 'var_0409 = layer file alpha alpha kappa file'},
                             {'role': 'user', 'content': 'turn 1: git_diff then show var_5780'}]},
               {'key': 'cold_race.15/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_6937 = epsilon engine beta omega check\n'
                                         'var_1385 = sigma state query engine list session\n'
                                         'var_4621 = omega sigma file open read test\n'
                                         'var_3301 = gamma file lambda query gamma\n'
                                         'var_6385 = path file read lambda cache error\n'
                                         'var_2863 = delta gamma build sigma gamma\n'
                                         'var_0079 = epsilon check agent check close list\n'
                                         'var_5323 = omega epsilon file search test read\n'
                                         'var_0340 = path layer theta error run agent\n'
                                         'var_4208 = close search run open read\n'
                                         'var_7034 = delta alpha zeta lambda result session\n'
                                         'var_2389 = value epsilon sigma test theta path\n'
                                         'var_9527 = session token value test run\n'
                                         'var_7199 = kappa session query file\n'
                                         'var_8639 = error alpha alpha search agent beta\n'
                                         'var_6160 = test lambda zeta cache alpha value'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_0340'},
                             {'role': 'assistant', 'content': 'var_0340 = path layer theta error run agent'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_6385'}]}]},
 {'name': 'same/cold',
  'requests': [{'key': 'same.0/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.1/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.2/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.3/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.4/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.5/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.6/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.7/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.8/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.9/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.10/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.11/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.12/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.13/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.14/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]},
               {'key': 'same.15/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'}]}]},
 {'name': 'same/resend',
  'requests': [{'key': 'same.0/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_6063'}]},
               {'key': 'same.1/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: read_file then show var_7390'}]},
               {'key': 'same.2/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_7169'}]},
               {'key': 'same.3/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: git_diff then show var_4756'}]},
               {'key': 'same.4/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: list_dir then show var_7390'}]},
               {'key': 'same.5/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: git_diff then show var_7169'}]},
               {'key': 'same.6/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_4756'}]},
               {'key': 'same.7/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_7390'}]},
               {'key': 'same.8/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_6300'}]},
               {'key': 'same.9/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_4756'}]},
               {'key': 'same.10/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_7390'}]},
               {'key': 'same.11/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_6300'}]},
               {'key': 'same.12/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: git_diff then show var_6063'}]},
               {'key': 'same.13/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: git_diff then show var_7390'}]},
               {'key': 'same.14/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: git_diff then show var_6300'}]},
               {'key': 'same.15/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4275 = file omega gamma list search token\n'
                                         'var_4756 = layer layer path close\n'
                                         'var_8488 = search layer token gamma agent delta\n'
                                         'var_4229 = list path value write test search\n'
                                         'var_6124 = build list open delta build alpha\n'
                                         'var_6063 = alpha engine query path search search\n'
                                         'var_1170 = theta run theta result close session\n'
                                         'var_7390 = omega value check state alpha lambda\n'
                                         'var_9159 = check value write epsilon check kappa\n'
                                         'var_6300 = beta dict cache delta error omega\n'
                                         'var_7169 = beta search list cache file lambda'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_1170'},
                             {'role': 'assistant',
                              'content': 'var_1170 = theta run theta result close session'},
                             {'role': 'user', 'content': 'turn 1: git_diff then show var_6063'}]}]},
 {'name': 'decode_cross/cross',
  'requests': [{'key': 'decode_cross.0/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4738 = test epsilon run sigma lambda read\n'
                                         'var_5457 = cache session state delta token close\n'
                                         'var_1705 = query kappa result gamma theta build\n'
                                         'var_5613 = list search check lambda kappa value\n'
                                         'var_0318 = read run epsilon cache read\n'
                                         'var_7998 = build build value delta beta run\n'
                                         'var_9860 = close delta sigma session block engine\n'
                                         'var_3666 = layer agent write cache\n'
                                         'var_5535 = path run search token result state\n'
                                         'var_8311 = state gamma sigma close block write\n'
                                         'var_6876 = token error beta delta test\n'
                                         'var_7162 = alpha read search delta session agent\n'
                                         'var_3562 = dict test token search omega\n'
                                         'var_1910 = kappa state state sigma close\n'
                                         'var_2139 = layer zeta zeta omega layer state\n'
                                         'var_7557 = query open kappa close beta error'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_7998'}]},
               {'key': 'decode_cross.1/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4876 = search delta kappa query result\n'
                                         'var_0571 = session kappa beta cache search delta\n'
                                         'var_5055 = write run result beta cache\n'
                                         'var_8362 = alpha value state write\n'
                                         'var_0171 = sigma path theta error file value\n'
                                         'var_4874 = gamma beta cache read lambda agent\n'
                                         'var_0998 = layer path list token agent write\n'
                                         'var_8302 = theta token beta query build lambda\n'
                                         'var_1642 = cache theta build state run epsilon\n'
                                         'var_3708 = token sigma kappa build run search\n'
                                         'var_3064 = layer value zeta check\n'
                                         'var_5534 = query theta search result epsilon sigma\n'
                                         'var_0522 = file layer open token beta state\n'
                                         'var_8920 = token epsilon close list kappa search\n'
                                         'var_5416 = cache search kappa list query\n'
                                         'var_5373 = beta lambda theta delta close delta'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_4874'}]},
               {'key': 'decode_cross.2/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0251 = beta token cache test close value\n'
                                         'var_1746 = file cache session search alpha value\n'
                                         'var_8393 = test layer lambda query token\n'
                                         'var_8499 = close block list token token beta\n'
                                         'var_0385 = lambda zeta omega theta lambda close\n'
                                         'var_6564 = token engine search query epsilon dict\n'
                                         'var_8569 = check engine zeta list open result\n'
                                         'var_5363 = delta dict read layer block\n'
                                         'var_2009 = file path test\n'
                                         'var_7507 = check sigma close build\n'
                                         'var_1818 = run list result agent search beta\n'
                                         'var_4005 = build test close sigma delta zeta\n'
                                         'var_9415 = token query list zeta session\n'
                                         'var_0718 = search cache session result gamma layer\n'
                                         'var_7837 = theta test list gamma build state\n'
                                         'var_2001 = run lambda lambda block read layer'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_6564'}]},
               {'key': 'decode_cross.3/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0180 = close open delta layer beta error\n'
                                         'var_9770 = close theta error run value\n'
                                         'var_0481 = gamma close open path open lambda\n'
                                         'var_0590 = kappa delta cache value test error\n'
                                         'var_9370 = write kappa dict write\n'
                                         'var_8204 = error open list write zeta check\n'
                                         'var_1166 = list dict write theta engine theta\n'
                                         'var_2473 = test layer value omega build delta\n'
                                         'var_7827 = read delta run error gamma path\n'
                                         'var_3068 = search build cache session list\n'
                                         'var_8134 = cache agent value token open engine\n'
                                         'var_8328 = read list check cache block layer\n'
                                         'var_7935 = delta sigma run kappa layer\n'
                                         'var_8129 = state result build block block\n'
                                         'var_3952 = zeta token delta\n'
                                         'var_0635 = close cache read write zeta sigma'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_8204'}]},
               {'key': 'decode_cross.4/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9183 = path query read agent epsilon path\n'
                                         'var_0628 = value delta agent\n'
                                         'var_7113 = path token theta token session beta\n'
                                         'var_7084 = list beta query agent list\n'
                                         'var_2555 = agent dict cache\n'
                                         'var_0763 = lambda lambda agent block layer sigma\n'
                                         'var_8713 = session block gamma test run search\n'
                                         'var_9178 = block query build gamma search\n'
                                         'var_0530 = sigma value theta close run\n'
                                         'var_9009 = run zeta open path agent result\n'
                                         'var_8057 = state layer block query read epsilon\n'
                                         'var_5729 = cache gamma file sigma theta block\n'
                                         'var_8166 = lambda build open open epsilon\n'
                                         'var_2808 = gamma test check error layer block\n'
                                         'var_1300 = token block close value list path\n'
                                         'var_5556 = read open zeta file path build'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_0763'}]},
               {'key': 'decode_cross.5/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3242 = engine agent check error dict token\n'
                                         'var_4347 = list agent theta beta layer agent\n'
                                         'var_9296 = query read token build value query\n'
                                         'var_8135 = sigma token file session list path\n'
                                         'var_3587 = engine value alpha token cache dict\n'
                                         'var_5511 = block list zeta write file beta\n'
                                         'var_7190 = write omega close delta build\n'
                                         'var_9939 = check run engine session\n'
                                         'var_4460 = value value cache error\n'
                                         'var_1294 = omega read gamma run\n'
                                         'var_2257 = state path write gamma query kappa\n'
                                         'var_4962 = run run state epsilon\n'
                                         'var_4258 = block sigma beta layer kappa result\n'
                                         'var_2878 = write result read dict theta kappa\n'
                                         'var_3343 = result beta write dict\n'
                                         'var_8830 = kappa layer read check kappa run'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_5511'}]},
               {'key': 'decode_cross.6/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_2438 = state omega search list file\n'
                                         'var_9684 = read check kappa result engine list\n'
                                         'var_4859 = read result dict read lambda session\n'
                                         'var_3321 = engine list query read\n'
                                         'var_8942 = cache cache file check cache\n'
                                         'var_6654 = dict sigma layer list engine test\n'
                                         'var_3839 = path session result omega query dict\n'
                                         'var_4480 = sigma query result lambda engine\n'
                                         'var_8004 = dict close layer omega alpha zeta\n'
                                         'var_9935 = omega check build dict\n'
                                         'var_3548 = zeta list kappa token zeta omega\n'
                                         'var_4404 = layer error list path delta zeta\n'
                                         'var_4105 = block gamma layer\n'
                                         'var_4174 = open value engine path omega\n'
                                         'var_6976 = delta value delta alpha alpha value\n'
                                         'var_9894 = omega open dict search value'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_6654'}]},
               {'key': 'decode_cross.7/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3263 = run state check block dict engine\n'
                                         'var_7043 = query theta agent query path omega\n'
                                         'var_7470 = check omega file check open\n'
                                         'var_5594 = file state result epsilon\n'
                                         'var_8171 = file theta token search token\n'
                                         'var_4773 = query write error write search dict\n'
                                         'var_8510 = omega query gamma lambda\n'
                                         'var_4275 = kappa delta build delta block\n'
                                         'var_1958 = kappa test path test gamma read\n'
                                         'var_6036 = gamma block query write kappa token\n'
                                         'var_6465 = state theta dict engine beta result\n'
                                         'var_3342 = write read read delta alpha\n'
                                         'var_8647 = write alpha open\n'
                                         'var_5172 = gamma value build check error write\n'
                                         'var_6191 = build run state dict search open\n'
                                         'var_4872 = open block build theta'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_4773'}]},
               {'key': 'decode_cross.8/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_2838 = zeta run file layer theta close\n'
                                         'var_7882 = file build omega run path layer\n'
                                         'var_2174 = delta epsilon error epsilon engine run\n'
                                         'var_5140 = theta sigma agent engine theta token\n'
                                         'var_6787 = sigma run test session file path\n'
                                         'var_2415 = engine file engine epsilon open build\n'
                                         'var_0363 = gamma theta epsilon run\n'
                                         'var_6118 = kappa search kappa theta sigma\n'
                                         'var_3283 = lambda open layer epsilon theta zeta\n'
                                         'var_8430 = build engine layer search\n'
                                         'var_0467 = test engine gamma result query agent\n'
                                         'var_4941 = value search gamma test list\n'
                                         'var_0282 = query search dict epsilon gamma query\n'
                                         'var_1109 = session search block dict omega open\n'
                                         'var_0165 = path lambda gamma open close list\n'
                                         'var_6024 = omega query write theta result state'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_2415'}]},
               {'key': 'decode_cross.9/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7810 = path result dict search file beta\n'
                                         'var_7530 = lambda query beta read gamma token\n'
                                         'var_8856 = alpha sigma gamma theta alpha write\n'
                                         'var_5765 = sigma query test state\n'
                                         'var_1460 = close gamma beta kappa delta\n'
                                         'var_9044 = file file build engine dict check\n'
                                         'var_0045 = query agent error error gamma\n'
                                         'var_2559 = query omega write state query result\n'
                                         'var_2163 = session write close kappa token alpha\n'
                                         'var_6064 = value gamma dict delta layer session\n'
                                         'var_9308 = search read read path gamma query\n'
                                         'var_9339 = value file kappa test block\n'
                                         'var_9234 = test alpha agent close\n'
                                         'var_3727 = test sigma delta beta search gamma\n'
                                         'var_3034 = test token file check theta test\n'
                                         'var_5237 = session epsilon list zeta lambda query'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_9044'}]},
               {'key': 'decode_cross.10/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0158 = epsilon list test session path\n'
                                         'var_0227 = zeta result alpha state test\n'
                                         'var_1281 = dict theta state gamma kappa close\n'
                                         'var_0502 = query beta error list cache\n'
                                         'var_3532 = query build result file dict\n'
                                         'var_1889 = gamma agent dict alpha kappa token\n'
                                         'var_2123 = error beta run gamma lambda open\n'
                                         'var_3910 = open search kappa query file theta\n'
                                         'var_4901 = layer write engine list value error\n'
                                         'var_3955 = result sigma run gamma omega query\n'
                                         'var_0314 = epsilon theta query block close test\n'
                                         'var_9571 = check query epsilon block gamma agent\n'
                                         'var_8940 = list gamma dict zeta path gamma\n'
                                         'var_0448 = value dict omega file open\n'
                                         'var_1212 = omega file delta token omega run\n'
                                         'var_0236 = zeta state omega'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_1889'}]},
               {'key': 'decode_cross.11/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4689 = block kappa omega search read close\n'
                                         'var_6188 = write block beta file sigma state\n'
                                         'var_7414 = read open result check theta\n'
                                         'var_6434 = value session engine gamma gamma zeta\n'
                                         'var_9315 = theta error open theta build\n'
                                         'var_1791 = read write list build file engine\n'
                                         'var_0874 = block omega file search theta\n'
                                         'var_6232 = session value engine run token read\n'
                                         'var_3656 = value delta token session\n'
                                         'var_0430 = read dict delta state run\n'
                                         'var_1071 = theta block check list\n'
                                         'var_6440 = result error layer write lambda test\n'
                                         'var_0839 = value token state run query session\n'
                                         'var_3605 = query kappa dict session run theta\n'
                                         'var_5967 = cache open theta cache gamma\n'
                                         'var_7770 = theta delta epsilon path gamma session'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_1791'}]},
               {'key': 'decode_cross.12/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9822 = lambda dict state dict delta\n'
                                         'var_3826 = kappa session engine delta path value\n'
                                         'var_4406 = error value block\n'
                                         'var_4958 = gamma cache path open block dict\n'
                                         'var_9604 = theta agent gamma error beta\n'
                                         'var_0056 = path error result gamma alpha close\n'
                                         'var_0462 = alpha beta agent close layer result\n'
                                         'var_6769 = gamma read error write run error\n'
                                         'var_4007 = search open state beta kappa read\n'
                                         'var_2544 = token session run\n'
                                         'var_1040 = layer run query omega omega path\n'
                                         'var_4324 = test state gamma alpha value\n'
                                         'var_2468 = error epsilon agent engine kappa\n'
                                         'var_6185 = dict value cache dict cache agent\n'
                                         'var_7207 = test dict sigma result check lambda\n'
                                         'var_2346 = error agent cache value read value'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_0056'}]},
               {'key': 'decode_cross.13/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9269 = epsilon kappa file result epsilon\n'
                                         'var_3010 = epsilon agent dict list agent\n'
                                         'var_2102 = open write theta session path value\n'
                                         'var_7493 = test test token beta zeta\n'
                                         'var_4479 = kappa build write read zeta gamma\n'
                                         'var_7169 = run gamma alpha agent error result\n'
                                         'var_1648 = layer value beta result result\n'
                                         'var_6269 = alpha write error\n'
                                         'var_1002 = error file open test query\n'
                                         'var_1974 = file sigma query kappa session open\n'
                                         'var_5366 = block path result path close file\n'
                                         'var_2385 = omega beta gamma dict query test\n'
                                         'var_3103 = beta epsilon close error list path\n'
                                         'var_8330 = alpha omega file value\n'
                                         'var_7711 = check query agent close check\n'
                                         'var_2111 = query value theta test state list'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_7169'}]},
               {'key': 'decode_cross.14/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_2967 = value result dict cache lambda\n'
                                         'var_5427 = cache read agent omega query state\n'
                                         'var_5243 = close theta omega alpha result\n'
                                         'var_0870 = error omega beta omega block list\n'
                                         'var_8693 = gamma test build beta run omega\n'
                                         'var_0016 = cache result beta read close list\n'
                                         'var_9222 = state check open list file engine\n'
                                         'var_7450 = search session file epsilon\n'
                                         'var_8494 = error layer token search\n'
                                         'var_2208 = omega delta error file kappa zeta\n'
                                         'var_1504 = epsilon session close agent close run\n'
                                         'var_6673 = alpha beta layer error read list\n'
                                         'var_8645 = check open run\n'
                                         'var_3186 = value token delta gamma theta\n'
                                         'var_6902 = run state run dict\n'
                                         'var_0614 = write block delta check file value'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_0016'}]},
               {'key': 'decode_cross.15/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_6415 = write alpha block\n'
                                         'var_0903 = dict search epsilon run\n'
                                         'var_1960 = close zeta open build\n'
                                         'var_2230 = zeta beta alpha error close list\n'
                                         'var_3049 = block block alpha error block\n'
                                         'var_4157 = dict list gamma theta beta open\n'
                                         'var_1404 = file alpha engine search alpha read\n'
                                         'var_7442 = cache dict value delta kappa session\n'
                                         'var_8559 = alpha path state list close delta\n'
                                         'var_6163 = write file check dict token\n'
                                         'var_5295 = open kappa path alpha value result\n'
                                         'var_0845 = error engine error list dict check\n'
                                         'var_1619 = file delta beta test close delta\n'
                                         'var_9159 = zeta list delta dict check value\n'
                                         'var_9271 = close write run\n'
                                         'var_6767 = error run epsilon result epsilon'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_4157'}]}]},
 {'name': 'decode_cross/resend',
  'requests': [{'key': 'decode_cross.0/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4738 = test epsilon run sigma lambda read\n'
                                         'var_5457 = cache session state delta token close\n'
                                         'var_1705 = query kappa result gamma theta build\n'
                                         'var_5613 = list search check lambda kappa value\n'
                                         'var_0318 = read run epsilon cache read\n'
                                         'var_7998 = build build value delta beta run\n'
                                         'var_9860 = close delta sigma session block engine\n'
                                         'var_3666 = layer agent write cache\n'
                                         'var_5535 = path run search token result state\n'
                                         'var_8311 = state gamma sigma close block write\n'
                                         'var_6876 = token error beta delta test\n'
                                         'var_7162 = alpha read search delta session agent\n'
                                         'var_3562 = dict test token search omega\n'
                                         'var_1910 = kappa state state sigma close\n'
                                         'var_2139 = layer zeta zeta omega layer state\n'
                                         'var_7557 = query open kappa close beta error'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_7998'},
                             {'role': 'assistant', 'content': 'var_7998 = build build value delta beta run'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_7557'}]},
               {'key': 'decode_cross.1/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4876 = search delta kappa query result\n'
                                         'var_0571 = session kappa beta cache search delta\n'
                                         'var_5055 = write run result beta cache\n'
                                         'var_8362 = alpha value state write\n'
                                         'var_0171 = sigma path theta error file value\n'
                                         'var_4874 = gamma beta cache read lambda agent\n'
                                         'var_0998 = layer path list token agent write\n'
                                         'var_8302 = theta token beta query build lambda\n'
                                         'var_1642 = cache theta build state run epsilon\n'
                                         'var_3708 = token sigma kappa build run search\n'
                                         'var_3064 = layer value zeta check\n'
                                         'var_5534 = query theta search result epsilon sigma\n'
                                         'var_0522 = file layer open token beta state\n'
                                         'var_8920 = token epsilon close list kappa search\n'
                                         'var_5416 = cache search kappa list query\n'
                                         'var_5373 = beta lambda theta delta close delta'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_4874'},
                             {'role': 'assistant',
                              'content': 'var_4874 = gamma beta cache read lambda agent'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_3708'}]},
               {'key': 'decode_cross.2/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0251 = beta token cache test close value\n'
                                         'var_1746 = file cache session search alpha value\n'
                                         'var_8393 = test layer lambda query token\n'
                                         'var_8499 = close block list token token beta\n'
                                         'var_0385 = lambda zeta omega theta lambda close\n'
                                         'var_6564 = token engine search query epsilon dict\n'
                                         'var_8569 = check engine zeta list open result\n'
                                         'var_5363 = delta dict read layer block\n'
                                         'var_2009 = file path test\n'
                                         'var_7507 = check sigma close build\n'
                                         'var_1818 = run list result agent search beta\n'
                                         'var_4005 = build test close sigma delta zeta\n'
                                         'var_9415 = token query list zeta session\n'
                                         'var_0718 = search cache session result gamma layer\n'
                                         'var_7837 = theta test list gamma build state\n'
                                         'var_2001 = run lambda lambda block read layer'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_6564'},
                             {'role': 'assistant',
                              'content': 'var_6564 = token engine search query epsilon dict'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_2001'}]},
               {'key': 'decode_cross.3/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0180 = close open delta layer beta error\n'
                                         'var_9770 = close theta error run value\n'
                                         'var_0481 = gamma close open path open lambda\n'
                                         'var_0590 = kappa delta cache value test error\n'
                                         'var_9370 = write kappa dict write\n'
                                         'var_8204 = error open list write zeta check\n'
                                         'var_1166 = list dict write theta engine theta\n'
                                         'var_2473 = test layer value omega build delta\n'
                                         'var_7827 = read delta run error gamma path\n'
                                         'var_3068 = search build cache session list\n'
                                         'var_8134 = cache agent value token open engine\n'
                                         'var_8328 = read list check cache block layer\n'
                                         'var_7935 = delta sigma run kappa layer\n'
                                         'var_8129 = state result build block block\n'
                                         'var_3952 = zeta token delta\n'
                                         'var_0635 = close cache read write zeta sigma'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_8204'},
                             {'role': 'assistant', 'content': 'var_8204 = error open list write zeta check'},
                             {'role': 'user', 'content': 'turn 1: list_dir then show var_7827'}]},
               {'key': 'decode_cross.4/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9183 = path query read agent epsilon path\n'
                                         'var_0628 = value delta agent\n'
                                         'var_7113 = path token theta token session beta\n'
                                         'var_7084 = list beta query agent list\n'
                                         'var_2555 = agent dict cache\n'
                                         'var_0763 = lambda lambda agent block layer sigma\n'
                                         'var_8713 = session block gamma test run search\n'
                                         'var_9178 = block query build gamma search\n'
                                         'var_0530 = sigma value theta close run\n'
                                         'var_9009 = run zeta open path agent result\n'
                                         'var_8057 = state layer block query read epsilon\n'
                                         'var_5729 = cache gamma file sigma theta block\n'
                                         'var_8166 = lambda build open open epsilon\n'
                                         'var_2808 = gamma test check error layer block\n'
                                         'var_1300 = token block close value list path\n'
                                         'var_5556 = read open zeta file path build'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_0763'},
                             {'role': 'assistant',
                              'content': 'var_0763 = lambda lambda agent block layer sigma'},
                             {'role': 'user', 'content': 'turn 1: list_dir then show var_8057'}]},
               {'key': 'decode_cross.5/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3242 = engine agent check error dict token\n'
                                         'var_4347 = list agent theta beta layer agent\n'
                                         'var_9296 = query read token build value query\n'
                                         'var_8135 = sigma token file session list path\n'
                                         'var_3587 = engine value alpha token cache dict\n'
                                         'var_5511 = block list zeta write file beta\n'
                                         'var_7190 = write omega close delta build\n'
                                         'var_9939 = check run engine session\n'
                                         'var_4460 = value value cache error\n'
                                         'var_1294 = omega read gamma run\n'
                                         'var_2257 = state path write gamma query kappa\n'
                                         'var_4962 = run run state epsilon\n'
                                         'var_4258 = block sigma beta layer kappa result\n'
                                         'var_2878 = write result read dict theta kappa\n'
                                         'var_3343 = result beta write dict\n'
                                         'var_8830 = kappa layer read check kappa run'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_5511'},
                             {'role': 'assistant', 'content': 'var_5511 = block list zeta write file beta'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_8830'}]},
               {'key': 'decode_cross.6/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_2438 = state omega search list file\n'
                                         'var_9684 = read check kappa result engine list\n'
                                         'var_4859 = read result dict read lambda session\n'
                                         'var_3321 = engine list query read\n'
                                         'var_8942 = cache cache file check cache\n'
                                         'var_6654 = dict sigma layer list engine test\n'
                                         'var_3839 = path session result omega query dict\n'
                                         'var_4480 = sigma query result lambda engine\n'
                                         'var_8004 = dict close layer omega alpha zeta\n'
                                         'var_9935 = omega check build dict\n'
                                         'var_3548 = zeta list kappa token zeta omega\n'
                                         'var_4404 = layer error list path delta zeta\n'
                                         'var_4105 = block gamma layer\n'
                                         'var_4174 = open value engine path omega\n'
                                         'var_6976 = delta value delta alpha alpha value\n'
                                         'var_9894 = omega open dict search value'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_6654'},
                             {'role': 'assistant', 'content': 'var_6654 = dict sigma layer list engine test'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_9894'}]},
               {'key': 'decode_cross.7/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3263 = run state check block dict engine\n'
                                         'var_7043 = query theta agent query path omega\n'
                                         'var_7470 = check omega file check open\n'
                                         'var_5594 = file state result epsilon\n'
                                         'var_8171 = file theta token search token\n'
                                         'var_4773 = query write error write search dict\n'
                                         'var_8510 = omega query gamma lambda\n'
                                         'var_4275 = kappa delta build delta block\n'
                                         'var_1958 = kappa test path test gamma read\n'
                                         'var_6036 = gamma block query write kappa token\n'
                                         'var_6465 = state theta dict engine beta result\n'
                                         'var_3342 = write read read delta alpha\n'
                                         'var_8647 = write alpha open\n'
                                         'var_5172 = gamma value build check error write\n'
                                         'var_6191 = build run state dict search open\n'
                                         'var_4872 = open block build theta'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_4773'},
                             {'role': 'assistant',
                              'content': 'var_4773 = query write error write search dict'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_6036'}]},
               {'key': 'decode_cross.8/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_2838 = zeta run file layer theta close\n'
                                         'var_7882 = file build omega run path layer\n'
                                         'var_2174 = delta epsilon error epsilon engine run\n'
                                         'var_5140 = theta sigma agent engine theta token\n'
                                         'var_6787 = sigma run test session file path\n'
                                         'var_2415 = engine file engine epsilon open build\n'
                                         'var_0363 = gamma theta epsilon run\n'
                                         'var_6118 = kappa search kappa theta sigma\n'
                                         'var_3283 = lambda open layer epsilon theta zeta\n'
                                         'var_8430 = build engine layer search\n'
                                         'var_0467 = test engine gamma result query agent\n'
                                         'var_4941 = value search gamma test list\n'
                                         'var_0282 = query search dict epsilon gamma query\n'
                                         'var_1109 = session search block dict omega open\n'
                                         'var_0165 = path lambda gamma open close list\n'
                                         'var_6024 = omega query write theta result state'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_2415'},
                             {'role': 'assistant',
                              'content': 'var_2415 = engine file engine epsilon open build'},
                             {'role': 'user', 'content': 'turn 1: git_diff then show var_6024'}]},
               {'key': 'decode_cross.9/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_7810 = path result dict search file beta\n'
                                         'var_7530 = lambda query beta read gamma token\n'
                                         'var_8856 = alpha sigma gamma theta alpha write\n'
                                         'var_5765 = sigma query test state\n'
                                         'var_1460 = close gamma beta kappa delta\n'
                                         'var_9044 = file file build engine dict check\n'
                                         'var_0045 = query agent error error gamma\n'
                                         'var_2559 = query omega write state query result\n'
                                         'var_2163 = session write close kappa token alpha\n'
                                         'var_6064 = value gamma dict delta layer session\n'
                                         'var_9308 = search read read path gamma query\n'
                                         'var_9339 = value file kappa test block\n'
                                         'var_9234 = test alpha agent close\n'
                                         'var_3727 = test sigma delta beta search gamma\n'
                                         'var_3034 = test token file check theta test\n'
                                         'var_5237 = session epsilon list zeta lambda query'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_9044'},
                             {'role': 'assistant', 'content': 'var_9044 = file file build engine dict check'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_5237'}]},
               {'key': 'decode_cross.10/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0158 = epsilon list test session path\n'
                                         'var_0227 = zeta result alpha state test\n'
                                         'var_1281 = dict theta state gamma kappa close\n'
                                         'var_0502 = query beta error list cache\n'
                                         'var_3532 = query build result file dict\n'
                                         'var_1889 = gamma agent dict alpha kappa token\n'
                                         'var_2123 = error beta run gamma lambda open\n'
                                         'var_3910 = open search kappa query file theta\n'
                                         'var_4901 = layer write engine list value error\n'
                                         'var_3955 = result sigma run gamma omega query\n'
                                         'var_0314 = epsilon theta query block close test\n'
                                         'var_9571 = check query epsilon block gamma agent\n'
                                         'var_8940 = list gamma dict zeta path gamma\n'
                                         'var_0448 = value dict omega file open\n'
                                         'var_1212 = omega file delta token omega run\n'
                                         'var_0236 = zeta state omega'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_1889'},
                             {'role': 'assistant',
                              'content': 'var_1889 = gamma agent dict alpha kappa token'},
                             {'role': 'user', 'content': 'turn 1: read_file then show var_0448'}]},
               {'key': 'decode_cross.11/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4689 = block kappa omega search read close\n'
                                         'var_6188 = write block beta file sigma state\n'
                                         'var_7414 = read open result check theta\n'
                                         'var_6434 = value session engine gamma gamma zeta\n'
                                         'var_9315 = theta error open theta build\n'
                                         'var_1791 = read write list build file engine\n'
                                         'var_0874 = block omega file search theta\n'
                                         'var_6232 = session value engine run token read\n'
                                         'var_3656 = value delta token session\n'
                                         'var_0430 = read dict delta state run\n'
                                         'var_1071 = theta block check list\n'
                                         'var_6440 = result error layer write lambda test\n'
                                         'var_0839 = value token state run query session\n'
                                         'var_3605 = query kappa dict session run theta\n'
                                         'var_5967 = cache open theta cache gamma\n'
                                         'var_7770 = theta delta epsilon path gamma session'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_1791'},
                             {'role': 'assistant', 'content': 'var_1791 = read write list build file engine'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_5967'}]},
               {'key': 'decode_cross.12/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9822 = lambda dict state dict delta\n'
                                         'var_3826 = kappa session engine delta path value\n'
                                         'var_4406 = error value block\n'
                                         'var_4958 = gamma cache path open block dict\n'
                                         'var_9604 = theta agent gamma error beta\n'
                                         'var_0056 = path error result gamma alpha close\n'
                                         'var_0462 = alpha beta agent close layer result\n'
                                         'var_6769 = gamma read error write run error\n'
                                         'var_4007 = search open state beta kappa read\n'
                                         'var_2544 = token session run\n'
                                         'var_1040 = layer run query omega omega path\n'
                                         'var_4324 = test state gamma alpha value\n'
                                         'var_2468 = error epsilon agent engine kappa\n'
                                         'var_6185 = dict value cache dict cache agent\n'
                                         'var_7207 = test dict sigma result check lambda\n'
                                         'var_2346 = error agent cache value read value'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_0056'},
                             {'role': 'assistant',
                              'content': 'var_0056 = path error result gamma alpha close'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_4324'}]},
               {'key': 'decode_cross.13/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9269 = epsilon kappa file result epsilon\n'
                                         'var_3010 = epsilon agent dict list agent\n'
                                         'var_2102 = open write theta session path value\n'
                                         'var_7493 = test test token beta zeta\n'
                                         'var_4479 = kappa build write read zeta gamma\n'
                                         'var_7169 = run gamma alpha agent error result\n'
                                         'var_1648 = layer value beta result result\n'
                                         'var_6269 = alpha write error\n'
                                         'var_1002 = error file open test query\n'
                                         'var_1974 = file sigma query kappa session open\n'
                                         'var_5366 = block path result path close file\n'
                                         'var_2385 = omega beta gamma dict query test\n'
                                         'var_3103 = beta epsilon close error list path\n'
                                         'var_8330 = alpha omega file value\n'
                                         'var_7711 = check query agent close check\n'
                                         'var_2111 = query value theta test state list'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_7169'},
                             {'role': 'assistant',
                              'content': 'var_7169 = run gamma alpha agent error result'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_2385'}]},
               {'key': 'decode_cross.14/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_2967 = value result dict cache lambda\n'
                                         'var_5427 = cache read agent omega query state\n'
                                         'var_5243 = close theta omega alpha result\n'
                                         'var_0870 = error omega beta omega block list\n'
                                         'var_8693 = gamma test build beta run omega\n'
                                         'var_0016 = cache result beta read close list\n'
                                         'var_9222 = state check open list file engine\n'
                                         'var_7450 = search session file epsilon\n'
                                         'var_8494 = error layer token search\n'
                                         'var_2208 = omega delta error file kappa zeta\n'
                                         'var_1504 = epsilon session close agent close run\n'
                                         'var_6673 = alpha beta layer error read list\n'
                                         'var_8645 = check open run\n'
                                         'var_3186 = value token delta gamma theta\n'
                                         'var_6902 = run state run dict\n'
                                         'var_0614 = write block delta check file value'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_0016'},
                             {'role': 'assistant', 'content': 'var_0016 = cache result beta read close list'},
                             {'role': 'user', 'content': 'turn 1: list_dir then show var_3186'}]},
               {'key': 'decode_cross.15/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_6415 = write alpha block\n'
                                         'var_0903 = dict search epsilon run\n'
                                         'var_1960 = close zeta open build\n'
                                         'var_2230 = zeta beta alpha error close list\n'
                                         'var_3049 = block block alpha error block\n'
                                         'var_4157 = dict list gamma theta beta open\n'
                                         'var_1404 = file alpha engine search alpha read\n'
                                         'var_7442 = cache dict value delta kappa session\n'
                                         'var_8559 = alpha path state list close delta\n'
                                         'var_6163 = write file check dict token\n'
                                         'var_5295 = open kappa path alpha value result\n'
                                         'var_0845 = error engine error list dict check\n'
                                         'var_1619 = file delta beta test close delta\n'
                                         'var_9159 = zeta list delta dict check value\n'
                                         'var_9271 = close write run\n'
                                         'var_6767 = error run epsilon result epsilon'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_4157'},
                             {'role': 'assistant', 'content': 'var_4157 = dict list gamma theta beta open'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_9271'}]}]},
 {'name': 'spec_tail/cold',
  'requests': [{'key': 'spec_tail.1b2/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3620 = token omega kappa list\n'
                                         'var_8496 = query alpha beta file search value\n'
                                         'var_1189 = result error search token error token\n'
                                         'var_0688 = alpha path theta session write open\n'
                                         'var_8978 = error file close value gamma agent\n'
                                         'var_6224 = run path zeta test epsilon test'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_6224'}]},
               {'key': 'spec_tail.1b3/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_1671 = path run close delta file run\n'
                                         'var_6205 = alpha close epsilon file value\n'
                                         'var_4173 = layer cache write omega open omega\n'
                                         'var_0740 = test value theta value path state\n'
                                         'var_2749 = token file sigma kappa zeta lambda\n'
                                         'var_0889 = error agent session omega theta test'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_0889'}]},
               {'key': 'spec_tail.1b4/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_1253 = agent sigma kappa error block epsilon\n'
                                         'var_7278 = kappa epsilon state omega sigma result\n'
                                         'var_4688 = list open read theta query layer\n'
                                         'var_8892 = result dict lambda zeta zeta session\n'
                                         'var_3319 = delta query path zeta engine search\n'
                                         'var_9197 = build agent error engine layer check'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_9197'}]},
               {'key': 'spec_tail.2b2/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4018 = sigma engine session gamma check\n'
                                         'var_2875 = theta delta result test list test\n'
                                         'var_8536 = write value epsilon value search\n'
                                         'var_6132 = write omega write read path write\n'
                                         'var_6331 = lambda check beta state omega engine\n'
                                         'var_3621 = cache result cache open sigma block\n'
                                         'var_5275 = read read zeta theta\n'
                                         'var_6335 = sigma session result file run\n'
                                         'var_6104 = theta engine dict run alpha query\n'
                                         'var_9135 = value test agent cache\n'
                                         'var_5267 = dict build block kappa search run\n'
                                         'var_0165 = write result value file sigma alpha\n'
                                         'var_5210 = lambda alpha kappa value value error\n'
                                         'var_1806 = test path lambda read search agent\n'
                                         'var_2377 = layer session check file\n'
                                         'var_2811 = check list epsilon\n'
                                         'var_8979 = build kappa close file cache check'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_8979'}]},
               {'key': 'spec_tail.2b3/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_8369 = theta run query build layer\n'
                                         'var_4437 = sigma gamma lambda dict alpha close\n'
                                         'var_7218 = zeta test dict layer theta lambda\n'
                                         'var_7122 = omega session error error read query\n'
                                         'var_6163 = read beta check epsilon layer delta\n'
                                         'var_8583 = omega layer build result read read\n'
                                         'var_4381 = list delta build session omega\n'
                                         'var_1832 = write close alpha alpha epsilon sigma\n'
                                         'var_8275 = epsilon sigma file open theta\n'
                                         'var_6989 = omega close test block engine gamma\n'
                                         'var_2123 = token epsilon write state list lambda\n'
                                         'var_5322 = token read alpha state test\n'
                                         'var_9905 = layer search close layer omega test\n'
                                         'var_7913 = dict token alpha\n'
                                         'var_4198 = token error list block zeta search\n'
                                         'var_1004 = run open agent\n'
                                         'var_1954 = build gamma epsilon engine layer'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_1954'}]},
               {'key': 'spec_tail.2b4/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_8592 = epsilon layer sigma state write error\n'
                                         'var_6365 = cache query search test cache epsilon\n'
                                         'var_7665 = gamma run read\n'
                                         'var_1888 = query file file run zeta write\n'
                                         'var_4233 = query agent check epsilon zeta token\n'
                                         'var_6669 = query delta error delta session session\n'
                                         'var_7609 = gamma kappa cache value read open\n'
                                         'var_5746 = kappa gamma omega engine list epsilon\n'
                                         'var_4897 = lambda file read search kappa test\n'
                                         'var_4362 = list result query test file sigma\n'
                                         'var_2245 = gamma gamma query path\n'
                                         'var_7208 = result path lambda alpha session\n'
                                         'var_0251 = open layer theta error write\n'
                                         'var_5942 = theta open search open open\n'
                                         'var_0100 = block gamma token dict token\n'
                                         'var_5486 = write list result layer lambda state\n'
                                         'var_9507 = state omega test list list'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_9507'}]}]},
 {'name': 'spec_tail/resend',
  'requests': [{'key': 'spec_tail.1b2/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_3620 = token omega kappa list\n'
                                         'var_8496 = query alpha beta file search value\n'
                                         'var_1189 = result error search token error token\n'
                                         'var_0688 = alpha path theta session write open\n'
                                         'var_8978 = error file close value gamma agent\n'
                                         'var_6224 = run path zeta test epsilon test'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_6224'}]},
               {'key': 'spec_tail.1b3/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_1671 = path run close delta file run\n'
                                         'var_6205 = alpha close epsilon file value\n'
                                         'var_4173 = layer cache write omega open omega\n'
                                         'var_0740 = test value theta value path state\n'
                                         'var_2749 = token file sigma kappa zeta lambda\n'
                                         'var_0889 = error agent session omega theta test'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_0889'}]},
               {'key': 'spec_tail.1b4/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_1253 = agent sigma kappa error block epsilon\n'
                                         'var_7278 = kappa epsilon state omega sigma result\n'
                                         'var_4688 = list open read theta query layer\n'
                                         'var_8892 = result dict lambda zeta zeta session\n'
                                         'var_3319 = delta query path zeta engine search\n'
                                         'var_9197 = build agent error engine layer check'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_9197'}]},
               {'key': 'spec_tail.2b2/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_4018 = sigma engine session gamma check\n'
                                         'var_2875 = theta delta result test list test\n'
                                         'var_8536 = write value epsilon value search\n'
                                         'var_6132 = write omega write read path write\n'
                                         'var_6331 = lambda check beta state omega engine\n'
                                         'var_3621 = cache result cache open sigma block\n'
                                         'var_5275 = read read zeta theta\n'
                                         'var_6335 = sigma session result file run\n'
                                         'var_6104 = theta engine dict run alpha query\n'
                                         'var_9135 = value test agent cache\n'
                                         'var_5267 = dict build block kappa search run\n'
                                         'var_0165 = write result value file sigma alpha\n'
                                         'var_5210 = lambda alpha kappa value value error\n'
                                         'var_1806 = test path lambda read search agent\n'
                                         'var_2377 = layer session check file\n'
                                         'var_2811 = check list epsilon\n'
                                         'var_8979 = build kappa close file cache check'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_8979'}]},
               {'key': 'spec_tail.2b3/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_8369 = theta run query build layer\n'
                                         'var_4437 = sigma gamma lambda dict alpha close\n'
                                         'var_7218 = zeta test dict layer theta lambda\n'
                                         'var_7122 = omega session error error read query\n'
                                         'var_6163 = read beta check epsilon layer delta\n'
                                         'var_8583 = omega layer build result read read\n'
                                         'var_4381 = list delta build session omega\n'
                                         'var_1832 = write close alpha alpha epsilon sigma\n'
                                         'var_8275 = epsilon sigma file open theta\n'
                                         'var_6989 = omega close test block engine gamma\n'
                                         'var_2123 = token epsilon write state list lambda\n'
                                         'var_5322 = token read alpha state test\n'
                                         'var_9905 = layer search close layer omega test\n'
                                         'var_7913 = dict token alpha\n'
                                         'var_4198 = token error list block zeta search\n'
                                         'var_1004 = run open agent\n'
                                         'var_1954 = build gamma epsilon engine layer'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_1954'}]},
               {'key': 'spec_tail.2b4/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_8592 = epsilon layer sigma state write error\n'
                                         'var_6365 = cache query search test cache epsilon\n'
                                         'var_7665 = gamma run read\n'
                                         'var_1888 = query file file run zeta write\n'
                                         'var_4233 = query agent check epsilon zeta token\n'
                                         'var_6669 = query delta error delta session session\n'
                                         'var_7609 = gamma kappa cache value read open\n'
                                         'var_5746 = kappa gamma omega engine list epsilon\n'
                                         'var_4897 = lambda file read search kappa test\n'
                                         'var_4362 = list result query test file sigma\n'
                                         'var_2245 = gamma gamma query path\n'
                                         'var_7208 = result path lambda alpha session\n'
                                         'var_0251 = open layer theta error write\n'
                                         'var_5942 = theta open search open open\n'
                                         'var_0100 = block gamma token dict token\n'
                                         'var_5486 = write list result layer lambda state\n'
                                         'var_9507 = state omega test list list'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_9507'}]}]},
 {'name': 'agent/turn-0',
  'requests': [{'key': 'agent.0/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_7337 = layer lambda file\n'
                                         'var_9526 = write session session\n'
                                         'var_8782 = list run session delta query\n'
                                         'var_8077 = delta search session write omega'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_7873'}]},
               {'key': 'agent.1/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_1389 = write engine file sigma\n'
                                         'var_3906 = list result theta file kappa gamma\n'
                                         'var_4141 = agent check value\n'
                                         'var_2874 = cache delta error'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_9846'}]},
               {'key': 'agent.2/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_0362 = token sigma alpha lambda layer\n'
                                         'var_7506 = error state result\n'
                                         'var_0333 = result zeta delta open\n'
                                         'var_3074 = agent token zeta file'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_6147'}]},
               {'key': 'agent.3/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_1971 = path run alpha\n'
                                         'var_6721 = build dict dict beta epsilon\n'
                                         'var_8093 = agent beta value state\n'
                                         'var_1433 = dict path session token'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_1971'}]}]},
 {'name': 'agent/turn-1',
  'requests': [{'key': 'agent.0/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_7337 = layer lambda file\n'
                                         'var_9526 = write session session\n'
                                         'var_8782 = list run session delta query\n'
                                         'var_8077 = delta search session write omega'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_7873'},
                             {'role': 'assistant', 'content': 'var_7873 = test run read state close theta'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_8077'}]},
               {'key': 'agent.1/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_1389 = write engine file sigma\n'
                                         'var_3906 = list result theta file kappa gamma\n'
                                         'var_4141 = agent check value\n'
                                         'var_2874 = cache delta error'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_9846'},
                             {'role': 'assistant',
                              'content': 'var_9846 = epsilon epsilon agent token theta gamma'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_2874'}]},
               {'key': 'agent.2/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_0362 = token sigma alpha lambda layer\n'
                                         'var_7506 = error state result\n'
                                         'var_0333 = result zeta delta open\n'
                                         'var_3074 = agent token zeta file'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_6147'},
                             {'role': 'assistant',
                              'content': 'var_6147 = beta delta theta result build dict'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_3074'}]},
               {'key': 'agent.3/1',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_1971 = path run alpha\n'
                                         'var_6721 = build dict dict beta epsilon\n'
                                         'var_8093 = agent beta value state\n'
                                         'var_1433 = dict path session token'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_1971'},
                             {'role': 'assistant', 'content': 'var_1971 = path run alpha'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_1433'}]}]},
 {'name': 'agent/turn-2',
  'requests': [{'key': 'agent.0/2',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_7337 = layer lambda file\n'
                                         'var_9526 = write session session\n'
                                         'var_8782 = list run session delta query\n'
                                         'var_8077 = delta search session write omega'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_7873'},
                             {'role': 'assistant', 'content': 'var_7873 = test run read state close theta'},
                             {'role': 'user', 'content': 'turn 1: run_tests then show var_8077'},
                             {'role': 'assistant', 'content': 'var_8077 = delta search session write omega'},
                             {'role': 'user', 'content': 'turn 2: run_tests then show var_8782'}]},
               {'key': 'agent.1/2',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_1389 = write engine file sigma\n'
                                         'var_3906 = list result theta file kappa gamma\n'
                                         'var_4141 = agent check value\n'
                                         'var_2874 = cache delta error'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_9846'},
                             {'role': 'assistant',
                              'content': 'var_9846 = epsilon epsilon agent token theta gamma'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_2874'},
                             {'role': 'assistant', 'content': 'var_2874 = cache delta error'},
                             {'role': 'user', 'content': 'turn 2: list_dir then show var_2496'}]},
               {'key': 'agent.2/2',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_0362 = token sigma alpha lambda layer\n'
                                         'var_7506 = error state result\n'
                                         'var_0333 = result zeta delta open\n'
                                         'var_3074 = agent token zeta file'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_6147'},
                             {'role': 'assistant',
                              'content': 'var_6147 = beta delta theta result build dict'},
                             {'role': 'user', 'content': 'turn 1: write_file then show var_3074'},
                             {'role': 'assistant', 'content': 'var_3074 = agent token zeta file'},
                             {'role': 'user', 'content': 'turn 2: read_file then show var_0333'}]},
               {'key': 'agent.3/2',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_1971 = path run alpha\n'
                                         'var_6721 = build dict dict beta epsilon\n'
                                         'var_8093 = agent beta value state\n'
                                         'var_1433 = dict path session token'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_1971'},
                             {'role': 'assistant', 'content': 'var_1971 = path run alpha'},
                             {'role': 'user', 'content': 'turn 1: search_code then show var_1433'},
                             {'role': 'assistant', 'content': 'var_1433 = dict path session token'},
                             {'role': 'user', 'content': 'turn 2: run_tests then show var_8093'}]}]},
 {'name': 'agent/switch-0',
  'requests': [{'key': 'agent.4/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_8623 = layer test theta zeta\n'
                                         'var_8197 = delta beta alpha path zeta\n'
                                         'var_2840 = value run close test\n'
                                         'var_9120 = build write zeta'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_9364'}]}]},
 {'name': 'agent/switch-1',
  'requests': [{'key': 'agent.5/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_9942 = search delta beta sigma theta close\n'
                                         'var_2698 = write search read sigma theta dict\n'
                                         'var_4629 = write sigma engine omega kappa epsilon\n'
                                         'var_4510 = build engine file agent theta lambda\n'
                                         'var_1866 = build build list lambda path dict\n'
                                         'var_1332 = lambda kappa session beta lambda path\n'
                                         'var_7951 = kappa alpha error read engine beta\n'
                                         'var_6606 = block session zeta epsilon sigma token\n'
                                         'var_8089 = theta query list test file query\n'
                                         'var_2724 = state test result gamma layer file\n'
                                         'var_4888 = beta theta agent dict write zeta\n'
                                         'var_1630 = block delta build alpha block test\n'
                                         'var_4908 = check error theta dict list run\n'
                                         'var_6731 = close sigma dict layer dict gamma\n'
                                         'var_7224 = layer zeta sigma token value file\n'
                                         'var_0078 = search theta omega list sigma kappa\n'
                                         'var_1135 = session test close beta dict theta\n'
                                         'var_9331 = session gamma sigma list test open\n'
                                         'var_5676 = error cache build sigma search list\n'
                                         'var_3684 = list build zeta search alpha check\n'
                                         'var_7873 = test run read state close theta\n'
                                         'var_7750 = close open alpha agent sigma open\n'
                                         'var_2190 = check kappa check list file write\n'
                                         'var_8667 = kappa zeta layer sigma build session\n'
                                         'var_2893 = build query dict test block error\n'
                                         'var_2854 = query theta result query engine error\n'
                                         'var_0600 = lambda agent search agent open layer\n'
                                         'var_0640 = alpha token result path lambda lambda\n'
                                         'var_8988 = gamma agent beta result sigma cache\n'
                                         'var_6257 = theta path state kappa dict list\n'
                                         'var_6280 = block path theta check open engine\n'
                                         'var_9759 = omega layer sigma omega check error\n'
                                         'var_3627 = read test run path build lambda\n'
                                         'var_9866 = theta search engine test query zeta\n'
                                         'var_5626 = delta agent test delta token sigma\n'
                                         'var_5838 = lambda state beta agent theta\n'
                                         'var_3535 = alpha build gamma layer read delta\n'
                                         'var_3370 = sigma layer delta block write check\n'
                                         'var_3098 = cache read kappa sigma zeta state\n'
                                         'var_0069 = write zeta layer value session state\n'
                                         'var_6590 = open value error alpha token read\n'
                                         'var_9907 = result theta error query block\n'
                                         'var_0470 = path session cache kappa agent lambda\n'
                                         'var_8858 = result path beta check gamma path\n'
                                         'var_9253 = kappa engine token build file engine\n'
                                         'var_9512 = list delta path cache check block\n'
                                         'var_9022 = read session search epsilon alpha delta\n'
                                         'var_8473 = search value query zeta zeta engine\n'
                                         'var_7599 = search engine value omega alpha error\n'
                                         'var_0464 = open kappa agent read close agent\n'
                                         'var_5196 = gamma dict run gamma open state\n'
                                         'var_2562 = layer list read gamma zeta search\n'
                                         'var_2367 = lambda write theta layer delta gamma\n'
                                         'var_8306 = gamma read sigma read engine path\n'
                                         'var_5663 = layer dict check block file value\n'
                                         'var_4636 = token delta token theta epsilon\n'
                                         'var_2404 = zeta engine engine kappa result\n'
                                         'var_5052 = agent result read result token theta\n'
                                         'var_2288 = engine check build state layer run\n'
                                         'var_9846 = epsilon epsilon agent token theta gamma\n'
                                         'var_7327 = state sigma state sigma read gamma\n'
                                         'var_4977 = block build agent check query\n'
                                         'var_5295 = check token block theta search close\n'
                                         'var_2719 = state open alpha beta state layer\n'
                                         'var_5189 = path beta path state file open\n'
                                         'var_1928 = run check epsilon token read write\n'
                                         'var_6334 = lambda close gamma path\n'
                                         'var_8463 = test lambda theta path agent build\n'
                                         'var_1098 = epsilon delta delta gamma read engine\n'
                                         'var_1289 = zeta file block write agent close\n'
                                         'var_3444 = path kappa token beta search list\n'
                                         'var_1664 = run dict block lambda alpha omega\n'
                                         'var_0506 = close epsilon epsilon kappa check error\n'
                                         'var_8253 = alpha block file error delta session\n'
                                         'var_8978 = result agent search run write list\n'
                                         'var_7562 = test block session epsilon sigma cache\n'
                                         'var_8633 = write error sigma beta delta sigma\n'
                                         'var_4370 = block build cache epsilon result sigma\n'
                                         'var_7692 = lambda kappa dict agent query check\n'
                                         'var_0215 = zeta write dict build file value\n'
                                         'var_8054 = omega dict kappa build delta cache\n'
                                         'var_6943 = error search theta result beta zeta\n'
                                         'var_5134 = engine query file error file state\n'
                                         'var_6111 = delta check cache close list dict\n'
                                         'var_4024 = kappa epsilon write check lambda omega\n'
                                         'var_8555 = file list error result build run\n'
                                         'var_4057 = close theta lambda block block kappa\n'
                                         'var_8767 = dict list layer agent list dict\n'
                                         'var_9654 = close token path delta zeta check\n'
                                         'var_7286 = list zeta session layer dict query\n'
                                         'var_8069 = alpha test theta token beta engine\n'
                                         'var_6147 = beta delta theta result build dict\n'
                                         'var_8865 = sigma token agent state open sigma\n'
                                         'var_3401 = write error cache result theta layer\n'
                                         'var_7761 = search alpha state sigma engine agent\n'
                                         'var_1933 = epsilon write omega gamma test gamma\n'
                                         'var_8265 = check gamma query file run run\n'
                                         'var_5481 = block path omega cache check query\n'
                                         'var_1481 = epsilon write result block sigma query\n'
                                         'var_9364 = cache agent build zeta cache layer\n'
                                         'var_9083 = beta zeta build lambda result alpha\n'
                                         'var_8685 = alpha zeta cache run lambda\n'
                                         'var_2496 = error agent build beta epsilon test\n'
                                         'var_7640 = omega block block run read error\n'
                                         'var_9574 = omega close file agent cache\n'
                                         'var_4676 = state epsilon alpha query query\n'
                                         'var_6269 = cache omega file\n'
                                         'var_5020 = open query test engine\n'
                                         'var_2898 = test run dict read'},
                             {'role': 'user', 'content': 'turn 0: read_file then show var_9083'}]}]},
 {'name': 'unique_tail/wave-0',
  'requests': [{'key': 'unique_tail.0.0/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0429 = error path delta omega zeta search\n'
                                         'var_1496 = close build zeta omega dict run\n'
                                         'var_1654 = write state epsilon file run run\n'
                                         'var_6064 = close open build omega layer state\n'
                                         'var_8187 = delta result session state session check\n'
                                         'var_2710 = theta close run sigma session lambda\n'
                                         'var_0207 = error gamma gamma beta write engine\n'
                                         'var_6489 = lambda delta epsilon lambda layer build\n'
                                         'var_1249 = dict gamma epsilon agent result read\n'
                                         'var_5783 = block layer close kappa write path\n'
                                         'var_1835 = state beta state agent query open\n'
                                         'var_5088 = beta omega result file build\n'
                                         'var_1700 = epsilon close beta epsilon write layer\n'
                                         'var_1430 = query state beta sigma run query\n'
                                         'var_9303 = write session gamma engine test value\n'
                                         'var_8960 = state list file read run value\n'
                                         'var_3045 = check dict state run result delta\n'
                                         'var_1116 = gamma engine query value layer value\n'
                                         'var_5353 = gamma close theta build omega close\n'
                                         'var_4405 = alpha engine sigma gamma write read\n'
                                         'var_7100 = run layer alpha run epsilon lambda\n'
                                         'var_7544 = layer gamma sigma sigma test dict\n'
                                         'var_6402 = open run lambda delta read engine\n'
                                         'var_5932 = agent delta layer error agent result\n'
                                         'var_4567 = lambda path epsilon engine result\n'
                                         'var_9356 = state gamma check cache token error\n'
                                         'var_3564 = error list result token theta theta\n'
                                         'var_8806 = search list theta close sigma cache\n'
                                         'var_8654 = path layer theta test path epsilon\n'
                                         'var_3115 = search error search dict agent\n'
                                         'var_5873 = file state result dict\n'
                                         'var_1221 = zeta engine build delta check\n'
                                         'var_2896 = open search open omega read token\n'
                                         'var_2077 = check beta block alpha beta theta\n'
                                         'var_8595 = token session lambda layer engine value\n'
                                         'var_3967 = block theta result sigma\n'
                                         'var_6452 = engine write theta epsilon result lambda\n'
                                         'var_7331 = delta layer read agent check\n'
                                         'var_1720 = kappa beta kappa delta check alpha'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_5353'}]},
               {'key': 'unique_tail.0.1/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0429 = error path delta omega zeta search\n'
                                         'var_1496 = close build zeta omega dict run\n'
                                         'var_1654 = write state epsilon file run run\n'
                                         'var_6064 = close open build omega layer state\n'
                                         'var_8187 = delta result session state session check\n'
                                         'var_2710 = theta close run sigma session lambda\n'
                                         'var_0207 = error gamma gamma beta write engine\n'
                                         'var_6489 = lambda delta epsilon lambda layer build\n'
                                         'var_1249 = dict gamma epsilon agent result read\n'
                                         'var_5783 = block layer close kappa write path\n'
                                         'var_1835 = state beta state agent query open\n'
                                         'var_5088 = beta omega result file build\n'
                                         'var_1700 = epsilon close beta epsilon write layer\n'
                                         'var_1430 = query state beta sigma run query\n'
                                         'var_9303 = write session gamma engine test value\n'
                                         'var_8960 = state list file read run value\n'
                                         'var_3045 = check dict state run result delta\n'
                                         'var_1116 = gamma engine query value layer value\n'
                                         'var_5353 = gamma close theta build omega close\n'
                                         'var_4405 = alpha engine sigma gamma write read\n'
                                         'var_7100 = run layer alpha run epsilon lambda\n'
                                         'var_7544 = layer gamma sigma sigma test dict\n'
                                         'var_6402 = open run lambda delta read engine\n'
                                         'var_1459 = engine test agent search read omega\n'
                                         'var_3629 = block query query close check omega\n'
                                         'var_0357 = alpha session query path gamma cache\n'
                                         'var_9500 = sigma value alpha omega engine check\n'
                                         'var_8430 = theta open error agent\n'
                                         'var_7183 = open value build open file\n'
                                         'var_6205 = layer build cache omega state omega\n'
                                         'var_1135 = epsilon value beta path query engine\n'
                                         'var_1022 = session search block test delta theta\n'
                                         'var_4656 = state build delta sigma query delta\n'
                                         'var_7269 = dict read gamma read path\n'
                                         'var_0040 = block open zeta kappa layer state\n'
                                         'var_3448 = beta check read engine result delta\n'
                                         'var_6189 = state state test lambda\n'
                                         'var_1679 = sigma error sigma cache\n'
                                         'var_2598 = check gamma result value check cache'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_6189'}]},
               {'key': 'unique_tail.0.2/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0429 = error path delta omega zeta search\n'
                                         'var_1496 = close build zeta omega dict run\n'
                                         'var_1654 = write state epsilon file run run\n'
                                         'var_6064 = close open build omega layer state\n'
                                         'var_8187 = delta result session state session check\n'
                                         'var_2710 = theta close run sigma session lambda\n'
                                         'var_0207 = error gamma gamma beta write engine\n'
                                         'var_6489 = lambda delta epsilon lambda layer build\n'
                                         'var_1249 = dict gamma epsilon agent result read\n'
                                         'var_5783 = block layer close kappa write path\n'
                                         'var_1835 = state beta state agent query open\n'
                                         'var_5088 = beta omega result file build\n'
                                         'var_1700 = epsilon close beta epsilon write layer\n'
                                         'var_1430 = query state beta sigma run query\n'
                                         'var_9303 = write session gamma engine test value\n'
                                         'var_8960 = state list file read run value\n'
                                         'var_3045 = check dict state run result delta\n'
                                         'var_1116 = gamma engine query value layer value\n'
                                         'var_5353 = gamma close theta build omega close\n'
                                         'var_4405 = alpha engine sigma gamma write read\n'
                                         'var_7100 = run layer alpha run epsilon lambda\n'
                                         'var_7544 = layer gamma sigma sigma test dict\n'
                                         'var_6402 = open run lambda delta read engine\n'
                                         'var_8315 = search session result build\n'
                                         'var_3475 = delta cache state result error search\n'
                                         'var_6802 = delta alpha check value dict\n'
                                         'var_0870 = list token error kappa dict state\n'
                                         'var_0033 = file open sigma cache value engine\n'
                                         'var_2036 = open dict zeta layer check\n'
                                         'var_1082 = dict run run path zeta block\n'
                                         'var_3678 = sigma open lambda lambda kappa lambda\n'
                                         'var_9211 = kappa omega file list build build\n'
                                         'var_9759 = error layer cache zeta alpha omega\n'
                                         'var_7528 = agent layer omega zeta agent\n'
                                         'var_3747 = zeta omega sigma run dict block\n'
                                         'var_1519 = open engine read path alpha theta\n'
                                         'var_0992 = alpha cache value query layer cache\n'
                                         'var_3573 = read layer cache\n'
                                         'var_9348 = error write read read gamma epsilon'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_5783'}]},
               {'key': 'unique_tail.0.3/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0429 = error path delta omega zeta search\n'
                                         'var_1496 = close build zeta omega dict run\n'
                                         'var_1654 = write state epsilon file run run\n'
                                         'var_6064 = close open build omega layer state\n'
                                         'var_8187 = delta result session state session check\n'
                                         'var_2710 = theta close run sigma session lambda\n'
                                         'var_0207 = error gamma gamma beta write engine\n'
                                         'var_6489 = lambda delta epsilon lambda layer build\n'
                                         'var_1249 = dict gamma epsilon agent result read\n'
                                         'var_5783 = block layer close kappa write path\n'
                                         'var_1835 = state beta state agent query open\n'
                                         'var_5088 = beta omega result file build\n'
                                         'var_1700 = epsilon close beta epsilon write layer\n'
                                         'var_1430 = query state beta sigma run query\n'
                                         'var_9303 = write session gamma engine test value\n'
                                         'var_8960 = state list file read run value\n'
                                         'var_3045 = check dict state run result delta\n'
                                         'var_1116 = gamma engine query value layer value\n'
                                         'var_5353 = gamma close theta build omega close\n'
                                         'var_4405 = alpha engine sigma gamma write read\n'
                                         'var_7100 = run layer alpha run epsilon lambda\n'
                                         'var_7544 = layer gamma sigma sigma test dict\n'
                                         'var_6402 = open run lambda delta read engine\n'
                                         'var_6861 = write error query write\n'
                                         'var_8237 = agent open test kappa\n'
                                         'var_2528 = error kappa build check gamma\n'
                                         'var_5652 = check dict gamma result error engine\n'
                                         'var_1899 = engine layer value lambda close query\n'
                                         'var_8451 = file state list read layer\n'
                                         'var_8769 = beta state search list search theta\n'
                                         'var_0722 = state state list read check sigma\n'
                                         'var_7946 = cache gamma open cache beta omega\n'
                                         'var_7510 = open theta gamma block epsilon error\n'
                                         'var_1159 = close epsilon epsilon dict\n'
                                         'var_3060 = engine run alpha epsilon gamma engine\n'
                                         'var_7882 = write agent layer value build token\n'
                                         'var_5716 = token error gamma delta cache file\n'
                                         'var_6307 = agent layer close gamma sigma gamma\n'
                                         'var_2998 = error layer cache dict engine test'},
                             {'role': 'user', 'content': 'turn 0: git_diff then show var_5716'}]}]},
 {'name': 'unique_tail/wave-1',
  'requests': [{'key': 'unique_tail.1.0/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0429 = error path delta omega zeta search\n'
                                         'var_1496 = close build zeta omega dict run\n'
                                         'var_1654 = write state epsilon file run run\n'
                                         'var_6064 = close open build omega layer state\n'
                                         'var_8187 = delta result session state session check\n'
                                         'var_2710 = theta close run sigma session lambda\n'
                                         'var_0207 = error gamma gamma beta write engine\n'
                                         'var_6489 = lambda delta epsilon lambda layer build\n'
                                         'var_1249 = dict gamma epsilon agent result read\n'
                                         'var_5783 = block layer close kappa write path\n'
                                         'var_1835 = state beta state agent query open\n'
                                         'var_5088 = beta omega result file build\n'
                                         'var_1700 = epsilon close beta epsilon write layer\n'
                                         'var_1430 = query state beta sigma run query\n'
                                         'var_9303 = write session gamma engine test value\n'
                                         'var_8960 = state list file read run value\n'
                                         'var_3045 = check dict state run result delta\n'
                                         'var_1116 = gamma engine query value layer value\n'
                                         'var_5353 = gamma close theta build omega close\n'
                                         'var_4405 = alpha engine sigma gamma write read\n'
                                         'var_7100 = run layer alpha run epsilon lambda\n'
                                         'var_7544 = layer gamma sigma sigma test dict\n'
                                         'var_6402 = open run lambda delta read engine\n'
                                         'var_3361 = search close gamma list zeta search\n'
                                         'var_0707 = lambda omega state list read engine\n'
                                         'var_1505 = test epsilon check sigma dict engine\n'
                                         'var_5817 = error sigma kappa result theta check\n'
                                         'var_2204 = read run query open delta open\n'
                                         'var_4674 = cache query search engine search test\n'
                                         'var_1987 = search layer state kappa test alpha\n'
                                         'var_7784 = theta lambda sigma block error session\n'
                                         'var_6894 = cache test test sigma dict value\n'
                                         'var_9668 = file search run path\n'
                                         'var_6888 = lambda agent search\n'
                                         'var_4116 = dict write session lambda open\n'
                                         'var_9248 = session dict state query open\n'
                                         'var_6906 = path kappa agent read cache\n'
                                         'var_1609 = engine token list engine zeta agent\n'
                                         'var_1918 = lambda result delta check close epsilon'},
                             {'role': 'user', 'content': 'turn 0: run_tests then show var_3045'}]},
               {'key': 'unique_tail.1.1/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0429 = error path delta omega zeta search\n'
                                         'var_1496 = close build zeta omega dict run\n'
                                         'var_1654 = write state epsilon file run run\n'
                                         'var_6064 = close open build omega layer state\n'
                                         'var_8187 = delta result session state session check\n'
                                         'var_2710 = theta close run sigma session lambda\n'
                                         'var_0207 = error gamma gamma beta write engine\n'
                                         'var_6489 = lambda delta epsilon lambda layer build\n'
                                         'var_1249 = dict gamma epsilon agent result read\n'
                                         'var_5783 = block layer close kappa write path\n'
                                         'var_1835 = state beta state agent query open\n'
                                         'var_5088 = beta omega result file build\n'
                                         'var_1700 = epsilon close beta epsilon write layer\n'
                                         'var_1430 = query state beta sigma run query\n'
                                         'var_9303 = write session gamma engine test value\n'
                                         'var_8960 = state list file read run value\n'
                                         'var_3045 = check dict state run result delta\n'
                                         'var_1116 = gamma engine query value layer value\n'
                                         'var_5353 = gamma close theta build omega close\n'
                                         'var_4405 = alpha engine sigma gamma write read\n'
                                         'var_7100 = run layer alpha run epsilon lambda\n'
                                         'var_7544 = layer gamma sigma sigma test dict\n'
                                         'var_6402 = open run lambda delta read engine\n'
                                         'var_2735 = check sigma search cache layer agent\n'
                                         'var_8049 = result sigma delta list path\n'
                                         'var_4683 = check run error session write gamma\n'
                                         'var_0982 = gamma kappa lambda check\n'
                                         'var_3102 = run omega layer open close epsilon\n'
                                         'var_9758 = file write session session omega beta\n'
                                         'var_8587 = value error close engine gamma\n'
                                         'var_2245 = result zeta engine sigma write token\n'
                                         'var_7249 = block path state delta value cache\n'
                                         'var_8146 = build omega epsilon close token theta\n'
                                         'var_2258 = cache gamma delta engine test build\n'
                                         'var_8409 = sigma gamma block kappa build\n'
                                         'var_3565 = epsilon layer file search path list\n'
                                         'var_9975 = omega theta engine session error\n'
                                         'var_8600 = error layer layer zeta\n'
                                         'var_2860 = delta agent close value list engine'},
                             {'role': 'user', 'content': 'turn 0: search_code then show var_1116'}]},
               {'key': 'unique_tail.1.2/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0429 = error path delta omega zeta search\n'
                                         'var_1496 = close build zeta omega dict run\n'
                                         'var_1654 = write state epsilon file run run\n'
                                         'var_6064 = close open build omega layer state\n'
                                         'var_8187 = delta result session state session check\n'
                                         'var_2710 = theta close run sigma session lambda\n'
                                         'var_0207 = error gamma gamma beta write engine\n'
                                         'var_6489 = lambda delta epsilon lambda layer build\n'
                                         'var_1249 = dict gamma epsilon agent result read\n'
                                         'var_5783 = block layer close kappa write path\n'
                                         'var_1835 = state beta state agent query open\n'
                                         'var_5088 = beta omega result file build\n'
                                         'var_1700 = epsilon close beta epsilon write layer\n'
                                         'var_1430 = query state beta sigma run query\n'
                                         'var_9303 = write session gamma engine test value\n'
                                         'var_8960 = state list file read run value\n'
                                         'var_3045 = check dict state run result delta\n'
                                         'var_1116 = gamma engine query value layer value\n'
                                         'var_5353 = gamma close theta build omega close\n'
                                         'var_4405 = alpha engine sigma gamma write read\n'
                                         'var_7100 = run layer alpha run epsilon lambda\n'
                                         'var_7544 = layer gamma sigma sigma test dict\n'
                                         'var_6402 = open run lambda delta read engine\n'
                                         'var_4295 = session query kappa write close epsilon\n'
                                         'var_2602 = cache path close run\n'
                                         'var_8415 = epsilon omega list build session epsilon\n'
                                         'var_3806 = engine agent value result run cache\n'
                                         'var_2853 = file epsilon error check error\n'
                                         'var_6289 = dict file run layer read\n'
                                         'var_4021 = token delta list engine gamma\n'
                                         'var_5166 = layer agent file test beta\n'
                                         'var_8768 = epsilon close lambda path\n'
                                         'var_2469 = result write gamma test session file\n'
                                         'var_8509 = theta kappa beta epsilon beta search\n'
                                         'var_6422 = omega list file read close alpha\n'
                                         'var_2872 = query search write zeta run result\n'
                                         'var_4072 = zeta lambda block agent path layer\n'
                                         'var_9853 = dict build search gamma agent zeta\n'
                                         'var_2708 = delta path state open alpha theta'},
                             {'role': 'user', 'content': 'turn 0: write_file then show var_2708'}]},
               {'key': 'unique_tail.1.3/0',
                'messages': [{'role': 'system',
                              'content': 'You are a coding agent. Use the tools and recall the identifiers '
                                         'exactly.\n'
                                         'tools: read_file write_file run_tests search_code list_dir '
                                         'git_diff\n'
                                         'var_0429 = error path delta omega zeta search\n'
                                         'var_1496 = close build zeta omega dict run\n'
                                         'var_1654 = write state epsilon file run run\n'
                                         'var_6064 = close open build omega layer state\n'
                                         'var_8187 = delta result session state session check\n'
                                         'var_2710 = theta close run sigma session lambda\n'
                                         'var_0207 = error gamma gamma beta write engine\n'
                                         'var_6489 = lambda delta epsilon lambda layer build\n'
                                         'var_1249 = dict gamma epsilon agent result read\n'
                                         'var_5783 = block layer close kappa write path\n'
                                         'var_1835 = state beta state agent query open\n'
                                         'var_5088 = beta omega result file build\n'
                                         'var_1700 = epsilon close beta epsilon write layer\n'
                                         'var_1430 = query state beta sigma run query\n'
                                         'var_9303 = write session gamma engine test value\n'
                                         'var_8960 = state list file read run value\n'
                                         'var_3045 = check dict state run result delta\n'
                                         'var_1116 = gamma engine query value layer value\n'
                                         'var_5353 = gamma close theta build omega close\n'
                                         'var_4405 = alpha engine sigma gamma write read\n'
                                         'var_7100 = run layer alpha run epsilon lambda\n'
                                         'var_7544 = layer gamma sigma sigma test dict\n'
                                         'var_6402 = open run lambda delta read engine\n'
                                         'var_4409 = state path build epsilon gamma layer\n'
                                         'var_4303 = query list agent close list write\n'
                                         'var_8779 = delta state write write sigma\n'
                                         'var_3357 = run dict delta delta engine\n'
                                         'var_1047 = cache test query engine file\n'
                                         'var_4007 = build open write test search zeta\n'
                                         'var_4506 = session lambda state kappa zeta sigma\n'
                                         'var_1421 = alpha check query open block path\n'
                                         'var_9526 = result check check lambda\n'
                                         'var_6897 = build agent value gamma value value\n'
                                         'var_9609 = epsilon test lambda close block list\n'
                                         'var_2788 = value open search zeta lambda path\n'
                                         'var_1305 = gamma layer query block lambda\n'
                                         'var_8911 = zeta write alpha close agent query\n'
                                         'var_1461 = engine beta delta beta kappa check\n'
                                         'var_4397 = value build token close'},
                             {'role': 'user', 'content': 'turn 0: list_dir then show var_3045'}]}]}]
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
