#!/usr/bin/env bash
# Session 8, device call 4: call3.sh re-run on the tree whose verify tail puts the committed keys
# in the flush workspace (call3 had them in 4 KB more shared memory: nvfp4 flush rows lost
# 0.73-0.85x). Same suites, settings and profile as call3.sh.
exec bash "$(dirname "$0")/call3.sh"
