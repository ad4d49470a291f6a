"""`lmlab.inspect`: analysis tools that show what a model computes and why it answers as it does."""
