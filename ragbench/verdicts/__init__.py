"""What a verdict is: two sets of cells compared under the policies (comparison: each cell of
head against base, the Verdict and Comparison types) and the words a verdict says (status)."""
