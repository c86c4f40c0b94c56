"""What is indexed and where it is read from: the sources file (typed, validated, with the chunking defaults it
starts from), git objects at a commit, and the breath file a source holds (``breath``: Δ-phase and tone)."""
