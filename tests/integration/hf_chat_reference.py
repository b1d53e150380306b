#!/usr/bin/env python3
"""hf_chat_reference.py TEMPLATE MESSAGES.json OUT.txt: the prompt text transformers' apply_chat_template gives
(Jinja2 set up as tests/models/chat_template_reference.py sets it up), with the generation prompt."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from chat_template_reference import environment  # noqa: E402

source = open(sys.argv[1], encoding="utf-8").read()
variables = json.load(open(sys.argv[2], encoding="utf-8"))
text = environment().from_string(source).render(add_generation_prompt=True, bos_token="<|begin_of_text|>",
                                                 eos_token="<|eot_id|>", **variables)
open(sys.argv[3], "w", encoding="utf-8").write(text)
