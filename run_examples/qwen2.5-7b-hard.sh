#!/usr/bin/env bash
# The paper's Hard-set run (see qwen2.5-7b.sh).
exec bash "$(dirname "$0")/qwen2.5-7b.sh" hard "$@"
