#!/bin/bash
# Trains every chapter of examples/book to its target; exits non-zero if one misses it.
set -u
cd "$(dirname "$0")"
status=0
for chapter in fit_a_line recognize_digits image_classification word2vec understand_sentiment understand_sentiment_lstm recommender_system label_semantic_roles machine_translation gan; do
  /usr/bin/python3 "$chapter.py" || status=1
done
exit $status
