"""Usage traces (what was asked, shown and found useful) and the nightly attention rollup built from them."""
