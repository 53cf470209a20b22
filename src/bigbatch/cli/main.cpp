// The bigbatch command-line tool.
int main() { return 0; }
