// 4-message floor: client -> leader -> 2 followers -> leader -> client. Mode: threads or processes.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <poll.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#define W 80
static int lst(int *port){int s=socket(AF_INET,SOCK_STREAM,0);struct sockaddr_in a={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)};bind(s,(void*)&a,sizeof a);listen(s,4);socklen_t l=sizeof a;getsockname(s,(void*)&a,&l);*port=ntohs(a.sin_port);return s;}
static int con(int port){int s=socket(AF_INET,SOCK_STREAM,0);struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(port),.sin_addr.s_addr=htonl(0x7f000001)};if(connect(s,(void*)&a,sizeof a))perror("connect");int one=1;setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);return s;}
static int acc(int l){int s=accept(l,0,0);int one=1;setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);return s;}
static int rd(int s,char*b,int n){int g=0;while(g<n){int r=read(s,b+g,n-g);if(r<=0)return -1;g+=r;}return 0;}
struct fa{int l;};
static void* follower(void*p){int l=((struct fa*)p)->l;int s=acc(l);char b[W];long seq=0;while(rd(s,b,W)==0){seq++;write(s,&seq,8);}return 0;}
static int lp,f1p,f2p,ll,fl1,fl2;
static void* leader(void*p){int f[2]={con(f1p),con(f2p)};int c=acc(ll);char b[W],a[8];long owed[2]={0,0};
 while(rd(c,b,W)==0){for(int i=0;i<2;i++){write(f[i],b,W);owed[i]++;}
  while(owed[0]>0&&owed[1]>0){struct pollfd pf[2]={{f[0],POLLIN,0},{f[1],POLLIN,0}};poll(pf,2,-1);for(int i=0;i<2;i++)if(pf[i].revents){rd(f[i],a,8);owed[i]--;}}
  write(c,b,8);}return 0;}
static int cmp(const void*a,const void*b){long x=*(long*)a,y=*(long*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){int procs=argc>1&&argv[1][0]=='p';int n=argc>2?atoi(argv[2]):20000;
 fl1=lst(&f1p);fl2=lst(&f2p);ll=lst(&lp);struct fa a1={fl1},a2={fl2};
 if(procs){if(!fork()){follower(&a1);_exit(0);} if(!fork()){follower(&a2);_exit(0);} if(!fork()){leader(0);_exit(0);} }
 else{pthread_t t;pthread_create(&t,0,follower,&a1);pthread_create(&t,0,follower,&a2);pthread_create(&t,0,leader,0);}
 usleep(100000);int c=con(lp);char b[W];memset(b,'x',W);char r[8];long*lat=malloc(8*n);
 for(int i=0;i<n+2000;i++){struct timespec t0,t1;clock_gettime(CLOCK_MONOTONIC,&t0);write(c,b,W);rd(c,r,8);clock_gettime(CLOCK_MONOTONIC,&t1);if(i>=2000)lat[i-2000]=(t1.tv_sec-t0.tv_sec)*1000000000L+t1.tv_nsec-t0.tv_nsec;}
 qsort(lat,n,8,cmp);printf("%s p50 %ld us p99 %ld us\n",procs?"processes":"threads",lat[n/2]/1000,lat[n*99/100]/1000);close(c);if(procs){while(wait(0)>0);}return 0;}
