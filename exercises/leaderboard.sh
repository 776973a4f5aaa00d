#!/bin/bash
# The course's CPU leaderboard: time a train_gpt configuration to a held-out accuracy target on
# the built-in addition task (exercises/leaderboard.py has the details; docs/COURSE.md the
# baseline).
#
#   bash exercises/leaderboard.sh [--target 0.5] [--name NAME] [--board FILE] -- FLAGS...
#
# Exit codes: 0 target reached, 1 not reached, 2 bad input (its own flags or train_gpt's).
exec python3 "$(dirname "$0")/leaderboard.py" "$@"
