"""The similarity engine: CKA, Procrustes and mutual k-NN between layers, on the rows every model shares."""
