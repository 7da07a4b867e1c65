// Which source this binary was built from (the role's tests change it between tags).
#define STANDIN_RELEASE "stand-in"
