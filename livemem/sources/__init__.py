"""What is indexed and where it is read from: the sources file (typed, validated) and git objects at a commit."""
