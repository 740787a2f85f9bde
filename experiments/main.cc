// chaosbed: one binary, many commands (experiments/cli/commands.cc lists them with their flags).

#include "experiments/cli/cli.h"

int main(int argc, char** argv) { return chaosbed::cli::main(argc, argv); }
