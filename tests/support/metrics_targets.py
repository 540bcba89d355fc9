"""What sinfo prints for the targets tests: nodes of several partitions, their addresses, states and GRES."""

from __future__ import annotations

# What `sinfo --noheader --Node --all --Format=NodeList:|,NodeAddr:|,StateLong:|,Gres:` prints on a
# ParallelCluster-like cluster: one line per node and partition, so p5-st-p5-1 (in gpu and debug) twice.
SINFO_TEXT = """\
p5-st-p5-1|10.0.64.11|mixed|gpu:h100:8(S:0-1)
p5-st-p5-2|10.0.64.12|allocated|gpu:h100:8(S:0-1)
p5-dy-p5-3|p5-dy-p5-3|idle~|gpu:h100:8(S:0-1)
p5-dy-p5-4|10.0.64.14|mix#|gpu:h100:8(S:0-1)
p5-st-p5-5|10.0.64.15|down*|gpu:h100:8(S:0-1)
p5-st-p5-6|10.0.64.16|drained|gpu:h100:8(S:0-1),gpu:a10g:1
p5-st-p5-1|10.0.64.11|mixed|gpu:h100:8(S:0-1)
cpu-st-c7-1|10.0.32.5|idle|(null)
cpu-dy-c7-2|10.0.32.6|down~|(null)
cpu-st-c7-3||idle|(null)
trn-st-trn1-1|10.0.96.7|draining@|neuron:16
head|10.0.0.2|idle%|(null)
"""
