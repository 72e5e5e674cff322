// The replication floor as four processes (client, leader, two followers) over blocking loopback TCP,
// with each process's CPU time: gcc -O2 -o /tmp/floor-cpu scripts/floor-cpu.c && /tmp/floor-cpu N PORT
// (ports PORT..PORT+2). Prints p50/p99 of N writes and each process's CPU ms (docs/bench.md, "What a wake costs").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#define WB 80
static int lst(int port){int s=socket(AF_INET,SOCK_STREAM,0),o=1;setsockopt(s,SOL_SOCKET,SO_REUSEADDR,&o,4);struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(port),.sin_addr.s_addr=htonl(0x7f000001)};if(bind(s,(void*)&a,sizeof a)){perror("bind");exit(1);}listen(s,4);return s;}
static int acc(int l){int s=accept(l,0,0),o=1;setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&o,4);return s;}
static int con(int port){int s=socket(AF_INET,SOCK_STREAM,0),o=1;struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(port),.sin_addr.s_addr=htonl(0x7f000001)};while(connect(s,(void*)&a,sizeof a)){usleep(10000);close(s);s=socket(AF_INET,SOCK_STREAM,0);}setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&o,4);return s;}
static int rx(int s,char*b,int n){int g=0;while(g<n){int r=read(s,b+g,n-g);if(r<=0)return -1;g+=r;}return 0;}
static void rep(const char*w){struct rusage u;getrusage(RUSAGE_SELF,&u);fprintf(stderr,"%s cpu_ms=%.1f\n",w,(u.ru_utime.tv_sec+u.ru_stime.tv_sec)*1e3+(u.ru_utime.tv_usec+u.ru_stime.tv_usec)/1e3);}
int main(int c,char**v){int N=atoi(v[1]),P=atoi(v[2]);char b[WB];
 if(!fork()){int l=lst(P+1),s=acc(l);uint64_t q=0;while(!rx(s,b,WB)){q++;write(s,&q,8);}rep("f1");exit(0);}
 if(!fork()){int l=lst(P+2),s=acc(l);uint64_t q=0;while(!rx(s,b,WB)){q++;write(s,&q,8);}rep("f2");exit(0);}
 if(!fork()){int l=lst(P),f[2]={con(P+1),con(P+2)},cl=acc(l);uint64_t owed[2]={0,0},a;
   while(!rx(cl,b,WB)){for(int i=0;i<2;i++){write(f[i],b,WB);owed[i]++;}
     struct pollfd p[2]={{f[0],POLLIN},{f[1],POLLIN}};int got=0;
     while(!got){poll(p,2,-1);for(int i=0;i<2;i++)if(p[i].revents){rx(f[i],(char*)&a,8);owed[i]--;if(owed[i]==0)got=1;}}
     write(cl,&a,8);}
   rep("leader");exit(0);}
 int s=con(P);double*lat=malloc(N*sizeof(double));struct timespec t0,t1;uint64_t a;
 for(int i=0;i<N;i++){clock_gettime(CLOCK_MONOTONIC,&t0);write(s,b,WB);rx(s,(char*)&a,8);clock_gettime(CLOCK_MONOTONIC,&t1);lat[i]=(t1.tv_sec-t0.tv_sec)*1e6+(t1.tv_nsec-t0.tv_nsec)/1e3;}
 rep("client");close(s);while(wait(0)>0);
 int cmp(const void*x,const void*y){double d=*(double*)x-*(double*)y;return d<0?-1:d>0;}qsort(lat,N,8,cmp);printf("N=%d p50=%.1fus p99=%.1fus\n",N,lat[N/2],lat[N*99/100]);}
