#!/usr/bin/env bash
# The CPU demo: real verl GRPO on SmolLM2-135M-Instruct, no GPU. Extra key=value arguments override the recipe.
set -euo pipefail
isocompute demo "$@"
