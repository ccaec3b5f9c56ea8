"""MATA: answers graded against ground truth, multiple-choice reading, robustness variants and runs, agreement."""
