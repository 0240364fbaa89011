#!/usr/bin/env bash
# load-images.sh [NAME...] — put `make images`' warmpath/<name>:dev images on
# the e2e node (its containerd), which has no registry to pull them from: the
# step a registry push is on a real cluster. Default: the images the chart
# runs (operator, router, cacheserver, vllm-sim, model-fetch).
set -euo pipefail
E2E_STEP=load-images
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
e2e_need_root
prefix="${IMAGE_PREFIX:-warmpath}" tag="${IMAGE_TAG:-dev}"
names=("$@")
((${#names[@]})) || names=(operator router cacheserver vllm-sim model-fetch)
refs=()
for n in "${names[@]}"; do refs+=("$prefix/$n:$tag"); done
e2e_import_image "${refs[@]}"
