#!/usr/bin/perl

# nginx's documentation examples, as the pages give them: the wiki's "Full
# Example Configuration" (nginx.conf with its proxy.conf, fastcgi.conf and
# mime.types; https://www.nginx.com/resources/wiki/start/topics/examples/full/)
# the wiki's "Simple Load Balancing" example (-t only), and the proxy
# module's example (nginx.org/en/docs/http/ngx_http_proxy_module.html).
# Only addresses, ports, paths and the user are rewritten by the test. They
# pass -t and serve: the PHP location by a FastCGI responder, the reverse
# proxy and the load-balanced server by backends in the test.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(10);
my $d = $t->testdir();
chmod 0755, $d;

sub spew { my ($f, $s) = @_; open my $fh, '>', $f or die "$f: $!\n"; print $fh $s; close $fh }

my $nginx_conf = <<'EOF';
user       www www;  ## Default: nobody
worker_processes  5;  ## Default: 1
error_log  logs/error.log;
pid        logs/nginx.pid;
worker_rlimit_nofile 8192;

events {
  worker_connections  4096;  ## Default: 1024
}

http {
  include    conf/mime.types;
  include    /etc/nginx/proxy.conf;
  include    /etc/nginx/fastcgi.conf;
  index    index.html index.htm index.php;

  default_type application/octet-stream;
  log_format   main '$remote_addr - $remote_user [$time_local]  $status '
    '"$request" $body_bytes_sent "$http_referer" '
    '"$http_user_agent" "$http_x_forwarded_for"';
  access_log   logs/access.log  main;
  sendfile     on;
  tcp_nopush   on;
  server_names_hash_bucket_size 128; # this seems to be required for some vhosts

  server { # php/fastcgi
    listen       80;
    server_name  domain1.com www.domain1.com;
    access_log   logs/domain1.access.log  main;
    root         html;

    location ~ \.php$ {
      fastcgi_pass   127.0.0.1:1025;
    }
  }

  server { # simple reverse-proxy
    listen       80;
    server_name  domain2.com www.domain2.com;
    access_log   logs/domain2.access.log  main;

    # serve static files
    location ~ ^/(images|javascript|js|css|flash|media|static)/  {
      root    /var/www/virtual/big.server.com/htdocs;
      expires 30d;
    }

    # pass requests for dynamic content to rails/turbogears/zope, et al
    location / {
      proxy_pass      http://127.0.0.1:8080;
    }
  }

  upstream big_server_com {
    server 127.0.0.3:8000 weight=5;
    server 127.0.0.3:8001 weight=5;
    server 192.168.0.1:8000;
    server 192.168.0.1:8001;
  }

  server { # simple load balancing
    listen          80;
    server_name     big.server.com;
    access_log      logs/big.server.access.log main;

    location / {
      proxy_pass      http://big_server_com;
    }
  }
}
EOF

my $proxy_conf = <<'EOF';
proxy_redirect          off;
proxy_set_header        Host            $host;
proxy_set_header        X-Real-IP       $remote_addr;
proxy_set_header        X-Forwarded-For $proxy_add_x_forwarded_for;
client_max_body_size    10m;
client_body_buffer_size 128k;
proxy_connect_timeout   90;
proxy_send_timeout      90;
proxy_read_timeout      90;
proxy_buffers           32 4k;
EOF

my $fastcgi_conf = <<'EOF';
fastcgi_param  SCRIPT_FILENAME    $document_root$fastcgi_script_name;
fastcgi_param  QUERY_STRING       $query_string;
fastcgi_param  REQUEST_METHOD     $request_method;
fastcgi_param  CONTENT_TYPE       $content_type;
fastcgi_param  CONTENT_LENGTH     $content_length;
fastcgi_param  SCRIPT_NAME        $fastcgi_script_name;
fastcgi_param  REQUEST_URI        $request_uri;
fastcgi_param  DOCUMENT_URI       $document_uri;
fastcgi_param  DOCUMENT_ROOT      $document_root;
fastcgi_param  SERVER_PROTOCOL    $server_protocol;
fastcgi_param  GATEWAY_INTERFACE  CGI/1.1;
fastcgi_param  SERVER_SOFTWARE    nginx/$nginx_version;
fastcgi_param  REMOTE_ADDR        $remote_addr;
fastcgi_param  REMOTE_PORT        $remote_port;
fastcgi_param  SERVER_ADDR        $server_addr;
fastcgi_param  SERVER_PORT        $server_port;
fastcgi_param  SERVER_NAME        $server_name;

fastcgi_index  index.php;

fastcgi_param  REDIRECT_STATUS    200;
EOF

my $mime_types = <<'EOF';
types {
  text/html                             html htm shtml;
  text/css                              css;
  text/xml                              xml rss;
  image/gif                             gif;
  image/jpeg                            jpeg jpg;
  application/x-javascript              js;
  text/plain                            txt;
  text/x-component                      htc;
  text/mathml                           mml;
  image/png                             png;
  image/x-icon                          ico;
  image/x-jng                           jng;
  image/vnd.wap.wbmp                    wbmp;
  application/java-archive              jar war ear;
  application/mac-binhex40              hqx;
  application/pdf                       pdf;
  application/x-cocoa                   cco;
  application/x-java-archive-diff       jardiff;
  application/x-java-jnlp-file          jnlp;
  application/x-makeself                run;
  application/x-perl                    pl pm;
  application/x-pilot                   prc pdb;
  application/x-rar-compressed          rar;
  application/x-redhat-package-manager  rpm;
  application/x-sea                     sea;
  application/x-shockwave-flash         swf;
  application/x-stuffit                 sit;
  application/x-tcl                     tcl tk;
  application/x-x509-ca-cert            der pem crt;
  application/x-xpinstall               xpi;
  application/zip                       zip;
  application/octet-stream              deb;
  application/octet-stream              bin exe dll;
  application/octet-stream              dmg;
  application/octet-stream              eot;
  application/octet-stream              iso img;
  application/octet-stream              msi msp msm;
  audio/mpeg                            mp3;
  audio/x-realaudio                     ra;
  video/mpeg                            mpeg mpg;
  video/quicktime                       mov;
  video/x-flv                           flv;
  video/x-msvideo                       avi;
  video/x-ms-wmv                        wmv;
  video/x-ms-asf                        asx asf;
  video/x-mng                           mng;
}
EOF

# The proxy module's example location, in a server of its own.
my $proxy_example = <<'EOF';
location / {
    proxy_pass       http://localhost:8000;
    proxy_set_header Host      $host;
    proxy_set_header X-Real-IP $remote_addr;
}
EOF

# The wiki's "Simple Load Balancing" example (its page gives the http block
# alone: the test adds the events block nginx requires).
my $lb_example = <<'EOF';
  http {
    upstream myproject {
      server 127.0.0.1:8000 weight=3;
      server 127.0.0.1:8001;
      server 127.0.0.1:8002;    
      server 127.0.0.1:8003;
    }

    server {
      listen 80;
      server_name www.domain.com;
      location / {
        proxy_pass http://myproject;
      }
    }
  }
EOF

mkdir "$d/$_" for qw/conf logs html static static\/images/;
spew("$d/conf/mime.types", $mime_types);
spew("$d/proxy.conf", $proxy_conf);
spew("$d/fastcgi.conf", $fastcgi_conf);
spew("$d/html/index.php", "<?php ?>\n");
spew("$d/static/images/a.png", "png\n");

my ($listen, $fcgi, $back, $b1, $b2, $b3, $b4, $docs) =
	map { port($_) } 8080, 8081, 8082, 8083, 8084, 8085, 8086, 8087;
my $conf = $nginx_conf;
# The user: the test's own (a worker must read the test directory).
my $user = getpwuid($>);
my $group = getgrgid((split / /, $))[0]);
$conf =~ s!^user       www www;!user       $user $group;!m;
$conf =~ s!/etc/nginx/!$d/!g;
$conf =~ s!listen( +)80;!listen${1}127.0.0.1:$listen;!g;
$conf =~ s!127\.0\.0\.1:1025!127.0.0.1:$fcgi!;
$conf =~ s!http://127\.0\.0\.1:8080!http://127.0.0.1:$back!;
$conf =~ s!127\.0\.0\.3:8000!127.0.0.1:$b1!;
$conf =~ s!127\.0\.0\.3:8001!127.0.0.1:$b2!;
$conf =~ s!192\.168\.0\.1:8000!127.0.0.1:$b3!;
$conf =~ s!192\.168\.0\.1:8001!127.0.0.1:$b4!;
$conf =~ s!/var/www/virtual/big\.server\.com/htdocs!$d/static!;
(my $example = $proxy_example) =~ s!localhost:8000!127.0.0.1:$back!;
$conf =~ s!\}\s*\z!  server { listen 127.0.0.1:$docs;\n$example  }\n}\n!;
spew("$d/nginx.conf", $conf);

my ($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', "$d/nginx.conf", '-t');
is($rc, 0, 'the full example passes -t') or diag($err);

(my $lb = $lb_example) =~ s!listen 80;!listen 127.0.0.1:$listen;!;
spew("$d/lb.conf", "events {}\n$lb");
($rc, $out, $err) = $t->run_binary('-p', "$d/", '-c', "$d/lb.conf", '-t');
is($rc, 0, 'the simple load balancing example passes -t') or diag($err);

$t->fastcgi($fcgi);
$t->backend($_) for $back, $b1, $b2, $b3, $b4;
$t->run(conf => "$d/nginx.conf", pid_file => "$d/logs/nginx.pid");

sub get {
	my ($host, $uri) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$_[2]") or return '';
	print $s "GET $uri HTTP/1.0\r\nHost: $host\r\n\r\n";
	local $/;
	return <$s> // '';
}

my $r = get('domain1.com', '/index.php?q=1', $listen);
like($r, qr/^X-Port: $fcgi\r$/m, 'php/fastcgi: the FastCGI responder answers');
like($r, qr/^SCRIPT_FILENAME=$d\/html\/index\.php$/m, '... with fastcgi.conf params');
like($r, qr/^SERVER_SOFTWARE=nginx\/\d/m, '... SERVER_SOFTWARE');
like(get('domain2.com', '/dyn', $listen), qr/^X-Port: $back/m, 'simple reverse-proxy: the backend');
like(get('www.domain2.com', '/images/a.png', $listen), qr/^Content-Type: image\/png\r\n.*^Expires: /ms, '... static files with expires and mime.types');
# Five workers, each with its own round robin (no zone) over weights
# 5, 5, 1, 1: of 120 requests one worker takes at least 24, two rounds.
my %seen;
for (1 .. 120) {
	my ($p) = get('big.server.com', '/', $listen) =~ /^X-Port: (\d+)/m;
	$seen{$p // 'none'}++;
}
is(scalar(grep { $seen{$_} } $b1, $b2, $b3, $b4), 4, 'simple load balancing: all four servers');
ok($seen{$b1} > $seen{$b3}, '... weight=5 first');
like(get('localhost', '/x', $docs), qr/^X-Port: $back/m, 'the proxy module example');

