"""Runs llama-cpp-python's OpenAI-compatible server (same arguments as ``python -m llama_cpp.server``).

Weight repacking is turned off: llama.cpp repacks weights for the CPU's extra instruction sets
(AMX), and on some CPUs that build crashes in the first decode. Without repacking the server
answers the same, a little slower.
"""

from __future__ import annotations

import llama_cpp.llama_cpp as bindings
from llama_cpp.server.__main__ import main

_defaults = bindings.llama_model_default_params


def _without_repacking() -> bindings.llama_model_params:
    params = _defaults()
    params.use_extra_bufts = False
    return params


bindings.llama_model_default_params = _without_repacking

if __name__ == "__main__":
    main()
