mod machines;
