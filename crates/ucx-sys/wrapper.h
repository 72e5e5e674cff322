/* The one header pmwire-ucx-sys binds: the UCP API (it includes the ucs types it uses). */
#include <ucp/api/ucp.h>
