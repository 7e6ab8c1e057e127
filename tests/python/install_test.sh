#!/usr/bin/env bash
# Installs the python component of BUILD into a fresh prefix and imports the package from there
# with PYTHON, in a clean environment, then generates with it on MODEL.
set -euo pipefail
build=$1 prefix=$2 python=$3 model=$4
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" --component python >/dev/null
site=$(find "$prefix" -name __init__.py -path '*/pagoda/*' -printf '%h\n' | head -1)
test -n "$site" || { echo "no pagoda package under $prefix" >&2; exit 1; }
env -i PATH=/usr/bin:/bin PYTHONPATH="$(dirname "$site")" PYTHONNOUSERSITE=1 \
  PYTHONDONTWRITEBYTECODE=1 PAGODA_LOG_LEVEL=warning "$python" -c "
import pagoda
from pagoda import LLM, SamplingParams
assert pagoda.__file__.startswith('$prefix'), pagoda.__file__
out = LLM(model='$model').generate('Hello', SamplingParams(temperature=0, max_tokens=4))
assert len(out[0].outputs[0].token_ids) == 4
print('installed package', pagoda.__version__, 'generated', out[0].outputs[0].token_ids)
"
