/* A task's host name resolved, as a peer would dial it (see include/dtrain/cluster.h). */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "dtrain/cluster.h"

dt_status dt_addr_resolve(const dt_addr *a, char *ip, size_t cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(a->host, NULL, &hints, &res);
    if (rc != 0)
        return dt_error(DT_ERR_UNAVAILABLE, "%s does not resolve: %s", a->host, gai_strerror(rc));
    const struct addrinfo *pick = res;
    for (const struct addrinfo *r = res; r; r = r->ai_next)
        if (r->ai_family == AF_INET) { /* IPv4 first, as the tasks bind */
            pick = r;
            break;
        }
    char text[INET6_ADDRSTRLEN] = "?";
    if (pick->ai_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)pick->ai_addr)->sin_addr, text,
                  sizeof text);
    else
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)pick->ai_addr)->sin6_addr, text,
                  sizeof text);
    freeaddrinfo(res);
    snprintf(ip, cap, "%s", text);
    return DT_OK;
}
