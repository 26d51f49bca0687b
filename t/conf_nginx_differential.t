#!/usr/bin/perl

# sluice -t beside nginx -t (Debian's /usr/sbin/nginx 1.22) on configuration
# snippets at the http level: quoting and escapes, variables in braces,
# comments, locations (modifiers written together, duplicates, nesting),
# if conditions (quoted values before the parenthesis, empty ones), map,
# geo, split_clients, set, rewrite, return, server names, listen, upstream
# blocks and their parameters, proxy_*, try_files, index, root and alias
# with variables, error_page, allow, limit_except, types, log_format,
# access_log, gzip, sub_filter, auth_basic and sizes and times. Each must
# be taken by both or refused by both, with nginx's words and line, but
# for the differences %KNOWN lists with their reasons (written in
# sluice.conf(5) where a user meets them).

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

plan(skip_all => 'no nginx') unless -x '/usr/sbin/nginx';

my $t = Test::Sluice->new()->plan(1);
my $d = $t->testdir();
mkdir "$d/logs";

# What a snippet holds => why the two differ on it.
my @KNOWN = (
	# Messages in other words (the verdict is the same).
	[qr/return 200 "\$\{ host\}"/, 'a variable name with a space: other words'],
	[qr/if \(\$a\) \{/, 'an unknown variable: nginx names no file and line, sluice does'],
	[qr/if \(\$http_x = a b\)/, 'the whole condition quoted, nginx quotes its first word'],
	[qr{proxy_pass http://u:80;}, 'the upstream named with its port'],
	[qr/proxy_busy_buffers_size 64k/, 'nginx names the line after the location (where it merges)'],
	[qr/proxy_http_version 1\.2/, 'the values it takes said too'],
	# Taken by one only.
	[qr/location \@a \{ \} location \@a/, 'a second named location of one name: sluice refuses it (nginx uses one)'],
	[qr/location ~ \^\/a \{ location \/b/, 'a prefix location inside a regex one: sluice takes it'],
	[qr/server_name (?:\*\.a\.\*|a\*b);/, 'a * inside a name or at both ends: sluice refuses it'],
	[qr/proxy_redirect default/, 'proxy_redirect default before proxy_pass: sluice takes it'],
	[qr/access_log \S*\$host/, 'variables in an access_log path: sluice refuses them (its logs are opened once, by the master)'],
);

sub verdict {
	my ($bin, $conf) = @_;
	$t->write_file('t.conf', $conf);
	my @cmd = $bin eq 'nginx'
		? ('/usr/sbin/nginx', '-t', '-p', "$d/", '-c', "$d/t.conf")
		: ($Test::Sluice::BINARY, '-t', '-p', "$d/", '-c', "$d/t.conf");
	my $out = `@{[ join ' ', map { "'$_'" } @cmd ]} 2>&1`;
	my $ok = $? == 0;
	my ($msg) = $out =~ /\[emerg\] (?:\d+#\d+: )?(.*)/;
	$msg = defined $msg ? $msg =~ s/\Q$d\E\/t\.conf/F/gr : '';
	return ($ok, $ok ? '' : $msg);
}

my (@diffs, $same, $known);
for my $s (split /\n===\n/, join('', <DATA>)) {
	$s =~ s/^\s+|\s+$//g;
	next unless length $s;
	my $conf = "error_log $d/logs/e.log;\npid $d/p.pid;\nevents {}\nhttp {\naccess_log off;\n$s\n}\n";
	my @n = verdict('nginx', $conf);
	my @m = verdict('sluice', $conf);
	my $alike = $n[0] == $m[0] && ($n[0] || $n[1] eq $m[1]);
	if ($alike) {
		$same++;
	} elsif (grep { $s =~ $_->[0] } @KNOWN) {
		$known++;
	} else {
		(my $one = $s) =~ s/\n/ /g;
		push @diffs, "$one\n  nginx:  " . ($n[0] ? 'taken' : "refused: $n[1]")
			. "\n  sluice: " . ($m[0] ? 'taken' : "refused: $m[1]");
	}
}
is(scalar(@diffs), 0, 'configuration snippets: taken or refused as nginx does ('
	. ($same // 0) . ' the same, ' . ($known // 0) . ' known)') or diag(join("\n", @diffs));

__DATA__
server { listen 127.0.0.1:19700; location / { return 200 "a;b"; } }
===
server { listen 127.0.0.1:19700; location / { return 200 'a"b'; } }
===
server { listen 127.0.0.1:19700; location / { return 200 "a\"b"; } }
===
server { listen 127.0.0.1:19700; location / { return 200 a\ b; } }
===
server { listen 127.0.0.1:19700; location / { return 200 "${host}x"; } }
===
server { listen 127.0.0.1:19700; location / { return 200 "$host{x}"; } }
===
server { listen 127.0.0.1:19700; location / { return 200 "${ host}"; } }
===
server { listen 127.0.0.1:19700; location / { return 200 "$"; } }
===
server { listen 127.0.0.1:19700; location / { return 200 "a$"; } }
===
server { listen 127.0.0.1:19700; location / { return 200 "${host"; } }
===
server { listen 127.0.0.1:19700; location / { return 200 "x"#comment
; } }
===
server { listen 127.0.0.1:19700; location / { return 200 x#notcomment; } }
===
server { listen 127.0.0.1:19700; location / {return 200;} }
===
server{listen 127.0.0.1:19700;location /{return 200;}}
===
server { listen 127.0.0.1:19700; location =/x { return 200; } }
===
server { listen 127.0.0.1:19700; location ^~/x { return 200; } }
===
server { listen 127.0.0.1:19700; location ~*\.php$ { return 200; } }
===
server { listen 127.0.0.1:19700; location ~ \.php$ { return 200; } location ~ \.php$ { return 201; } }
===
server { listen 127.0.0.1:19700; location /x { return 200; } location /x { return 201; } }
===
server { listen 127.0.0.1:19700; location = /x { return 200; } location /x { return 201; } }
===
server { listen 127.0.0.1:19700; location "/a b" { return 200; } }
===
server { listen 127.0.0.1:19700; location ~ "^/a{2}" { return 200; } }
===
server { listen 127.0.0.1:19700; location ~ ^/a{2} { return 200; } }
===
server { listen 127.0.0.1:19700; if ($host ~ "^(www)\.") { return 301; } }
===
server { listen 127.0.0.1:19700; if ($host ~ ^(www)\.) { return 301; } }
===
server { listen 127.0.0.1:19700; if ($http_user_agent ~* (curl|wget)) { return 403; } }
===
server { listen 127.0.0.1:19700; if ($http_user_agent ~* "(curl|wget)" ) { return 403; } }
===
server { listen 127.0.0.1:19700; if ( $request_method !~ ^(GET|HEAD)$ ) { return 405; } }
===
server { listen 127.0.0.1:19700; if ($request_method !~ ^(GET|HEAD)$) { return 405; } }
===
server { listen 127.0.0.1:19700; if ($a) { } }
===
server { listen 127.0.0.1:19700; if ($scheme = http) { return 301 https://$host$request_uri; } }
===
server { listen 127.0.0.1:19700; if ($scheme = 'http') { return 301 https://$host$request_uri; } }
===
server { listen 127.0.0.1:19700; if ($http_x = "a b") { return 403; } }
===
server { listen 127.0.0.1:19700; if ($http_x = a b) { return 403; } }
===
server { listen 127.0.0.1:19700; if (-f $request_filename) { break; } }
===
server { listen 127.0.0.1:19700; if (!-e $request_filename) { rewrite ^ /index.php last; } }
===
server { listen 127.0.0.1:19700; if ($uri ~ "\.(jpg|png)$") { expires 30d; } }
===
server { listen 127.0.0.1:19700; location / { if ($arg_a) { add_header X-A 1; proxy_pass http://127.0.0.1:1; } } }
===
server { listen 127.0.0.1:19700; location / { if ($arg_a) { root /tmp; } } }
===
server { listen 127.0.0.1:19700; location / { grpc_set_header X-A 1; if ($arg_a) { grpc_pass grpc://127.0.0.1:1; } } }
===
server { listen 127.0.0.1:19700; location / { if ($arg_a) { grpc_pass grpc://127.0.0.1:1/x; } } }
===
server { listen 127.0.0.1:19700; location / { grpc_pass grpc://u/path; } }
upstream u { server 127.0.0.1:1; }
===
server { listen 127.0.0.1:19700; location / { fastcgi_pass 127.0.0.1:1/x; } }
===
server { listen 127.0.0.1:19700; location / { fastcgi_pass http://127.0.0.1:1; } }
===
server { listen 127.0.0.1:19700; location / { fastcgi_pass unix:/tmp/a.sock; } }
===
server { listen 127.0.0.1:19700; location / { if ($arg_a) { try_files $uri =404; } } }
===
map $http_x $m { default 0; "~^a b" 1; 'q' 2; \default 3; hostnames; }
server { listen 127.0.0.1:19700; }
===
map $http_x $m { default 0; ~^a 1; ~^a 2; }
server { listen 127.0.0.1:19700; }
===
map $http_x $m { a 1; a 2; }
server { listen 127.0.0.1:19700; }
===
map $http_x $m { default 0; include /tmp/cx/none*.map; }
server { listen 127.0.0.1:19700; }
===
map $http_x $m { }
server { listen 127.0.0.1:19700; }
===
map $http_x $m { volatile; default 0; }
server { listen 127.0.0.1:19700; }
===
server { listen 127.0.0.1:19700; set $a "x"; set $b $a$a; set $c "${a}y"; }
===
server { listen 127.0.0.1:19700; set $1 x; }
===
server { listen 127.0.0.1:19700; set a x; }
===
server { listen 127.0.0.1:19700; set $uri x; }
===
server { listen 127.0.0.1:19700; set $host x; }
===
server { listen 127.0.0.1:19700; rewrite ^/(.*)$ /$1 last; rewrite ^ /x? permanent; }
===
server { listen 127.0.0.1:19700; rewrite "^/a b" /x; }
===
server { listen 127.0.0.1:19700; rewrite ^/a{1,2}$ /x; }
===
server { listen 127.0.0.1:19700; rewrite (.*) $1 bogus; }
===
server { listen 127.0.0.1:19700; return 301; }
===
server { listen 127.0.0.1:19700; return 999; }
===
server { listen 127.0.0.1:19700; return https://x; }
===
server { listen 127.0.0.1:19700; return 200 a b; }
===
server { listen 127.0.0.1:19700; return abc; }
===
server { listen 127.0.0.1:19700; location / { } location / { } }
===
server { listen 127.0.0.1:19700; location @a { } location @a { } }
===
server { listen 127.0.0.1:19700; location @a { location /x { } } }
===
server { listen 127.0.0.1:19700; location /a { location /b { } } }
===
server { listen 127.0.0.1:19700; location /a { location /a/b { } } }
===
server { listen 127.0.0.1:19700; location ~ ^/a { location /b { } } }
===
server { listen 127.0.0.1:19700; location ~ ^/a { location ~ ^/a/b { } } }
===
server { listen 127.0.0.1:19700; location = /a { location /a { } } }
===
server { listen 127.0.0.1:19700; server_name "~^(?<x>.+)\.t$" a.t *.b.t .c.t _ ""; }
===
server { listen 127.0.0.1:19700; server_name a.*; }
===
server { listen 127.0.0.1:19700; server_name *.a.*; }
===
server { listen 127.0.0.1:19700; server_name a*b; }
===
server { listen 127.0.0.1:19700 default_server; } server { listen 127.0.0.1:19700 default_server; }
===
server { listen 127.0.0.1:19700; server_name a; } server { listen 127.0.0.1:19700; server_name a; }
===
server { listen 19700; listen 127.0.0.1:19700; }
===
server { listen 127.0.0.1:19700; } server { listen 127.0.0.1:19700 backlog=10; }
===
server { listen [::1]:19700 ipv6only=on; }
===
server { listen localhost:19700; }
===
server { listen 127.0.0.1:19700; location / { proxy_pass http://127.0.0.1:1/$uri; } }
===
server { listen 127.0.0.1:19700; location ~ /a { proxy_pass http://127.0.0.1:1/x; } }
===
server { listen 127.0.0.1:19700; location @n { proxy_pass http://127.0.0.1:1/x; } }
===
server { listen 127.0.0.1:19700; location / { proxy_pass http://127.0.0.1:1; proxy_set_header Host; } }
===
server { listen 127.0.0.1:19700; location / { proxy_set_header X-A $http_a; proxy_set_header x-a b; proxy_pass http://127.0.0.1:1; } }
===
server { listen 127.0.0.1:19700; location / { add_header X 1 always; add_header Y "" ; add_header Z 2 bogus; } }
===
server { listen 127.0.0.1:19700; location / { expires max; expires epoch; } }
===
server { listen 127.0.0.1:19700; location / { expires @15h30m; } }
===
server { listen 127.0.0.1:19700; location / { expires modified +1d; } }
===
server { listen 127.0.0.1:19700; location / { expires -1; } }
===
server { listen 127.0.0.1:19700; client_max_body_size 1m; client_max_body_size 2m; }
===
server { listen 127.0.0.1:19700; client_max_body_size 1g; client_body_buffer_size 1K; large_client_header_buffers 4 16k; }
===
server { listen 127.0.0.1:19700; client_max_body_size 1.5m; }
===
server { listen 127.0.0.1:19700; keepalive_timeout 75s 60s; send_timeout 1h30m; }
===
server { listen 127.0.0.1:19700; keepalive_timeout 1d 1y; }
===
server { listen 127.0.0.1:19700; proxy_read_timeout 500ms; }
===
server { listen 127.0.0.1:19700; proxy_read_timeout 1 s; }
===
upstream u { server 127.0.0.1:1 weight=0; }
server { listen 127.0.0.1:19700; }
===
upstream u { server 127.0.0.1:1 weight=5 max_fails=0 fail_timeout=0; server 127.0.0.1:2 down; server 127.0.0.1:3 backup; }
server { listen 127.0.0.1:19700; }
===
upstream u { hash $uri consistent; server 127.0.0.1:1; server 127.0.0.1:3 backup; }
server { listen 127.0.0.1:19700; }
===
upstream u { ip_hash; server 127.0.0.1:1 weight=2; server 127.0.0.1:2 down; }
server { listen 127.0.0.1:19700; }
===
upstream u { ip_hash; server 127.0.0.1:1; server 127.0.0.1:3 backup; }
server { listen 127.0.0.1:19700; }
===
upstream u { }
server { listen 127.0.0.1:19700; }
===
upstream u { server 127.0.0.1:1; } upstream u { server 127.0.0.1:2; }
server { listen 127.0.0.1:19700; }
===
upstream u { server 127.0.0.1; server unix:/tmp/x.sock; server [::1]:1; }
server { listen 127.0.0.1:19700; }
===
upstream u { server 127.0.0.1:1 max_conns=2; least_conn; }
server { listen 127.0.0.1:19700; }
===
upstream u { server 127.0.0.1:1; keepalive 16; keepalive_timeout 10s; keepalive_requests 100; }
server { listen 127.0.0.1:19700; location / { proxy_pass http://u; } }
===
server { listen 127.0.0.1:19700; location / { proxy_pass http://u; } }
===
server { listen 127.0.0.1:19700; location / { proxy_pass http://u:80; } }
===
server { listen 127.0.0.1:19700; location / { try_files $uri $uri/ /index.php?$args; } }
===
server { listen 127.0.0.1:19700; location / { try_files $uri; } }
===
server { listen 127.0.0.1:19700; location / { try_files =404; } }
===
server { listen 127.0.0.1:19700; location / { index index.php index.html /abs.html; } }
===
server { listen 127.0.0.1:19700; location / { index $uri.html; } }
===
server { listen 127.0.0.1:19700; location / { alias /tmp/; root /tmp; } }
===
server { listen 127.0.0.1:19700; location ~ ^/a(.*) { alias /tmp/$1; } }
===
server { listen 127.0.0.1:19700; location ~ ^/a(.*) { alias /tmp/; } }
===
server { listen 127.0.0.1:19700; error_page 404 /404.html; error_page 500 502 =200 @x; location @x { } }
===
server { listen 127.0.0.1:19700; error_page 404 =301 http://x/; }
===
server { listen 127.0.0.1:19700; error_page 299 /x; }
===
server { listen 127.0.0.1:19700; error_page 404; }
===
server { listen 127.0.0.1:19700; allow 10.0.0.0/8; allow 10.1.2.3/8; deny all; allow unix:; }
===
server { listen 127.0.0.1:19700; allow 10.0.0.0/33; }
===
server { listen 127.0.0.1:19700; location / { limit_except GET POST { deny all; } } }
===
server { listen 127.0.0.1:19700; location / { limit_except get { deny all; } } }
===
server { listen 127.0.0.1:19700; location / { limit_except FOO { deny all; } } }
===
types { text/html html htm; "application/x y" z; }
server { listen 127.0.0.1:19700; }
===
default_type "text/plain; charset=utf-8";
server { listen 127.0.0.1:19700; }
===
log_format a '$remote_addr "$request"' ' $status';
log_format a 'x';
server { listen 127.0.0.1:19700; }
===
log_format b escape=json '{"a":"$uri"}';
server { listen 127.0.0.1:19700; access_log /tmp/cx/logs/a.log b buffer=32k flush=5s if=$uri; }
===
server { listen 127.0.0.1:19700; access_log /tmp/cx/logs/a.log combined gzip; }
===
server { listen 127.0.0.1:19700; access_log syslog:server=127.0.0.1; }
===
server { listen 127.0.0.1:19700; access_log off; access_log /tmp/cx/logs/a.log; }
===
server { listen 127.0.0.1:19700; access_log /tmp/cx/logs/$host.log; }
===
geo $a { default 0; 10.0.0.0/8 1; delete 10.1.0.0/16; proxy 127.0.0.1; proxy_recursive; }
server { listen 127.0.0.1:19700; }
===
split_clients "$uri" $s { 50% a; 50% b; }
server { listen 127.0.0.1:19700; }
===
split_clients "$uri" $s { 60% a; 50% b; }
server { listen 127.0.0.1:19700; }
===
server { listen 127.0.0.1:19700; } 
include /tmp/cx/nonexistent.conf;
===
server { listen 127.0.0.1:19700; location / { gzip on; gzip_types *; gzip_comp_level 10; } }
===
server { listen 127.0.0.1:19700; location / { gzip on; gzip_min_length 1k; gzip_proxied any expired; gzip_vary on; gzip_disable msie6; } }
===
server { listen 127.0.0.1:19700; location / { sub_filter '' x; } }
===
server { listen 127.0.0.1:19700; location / { auth_basic "a b"; auth_basic_user_file /tmp/cx/none; } }
===
server { listen 127.0.0.1:19700; location / { satisfy any; satisfy all; } }
===
server { listen 127.0.0.1:19700; underscores_in_headers on; ignore_invalid_headers off; merge_slashes off; }
===
server { listen 127.0.0.1:19700; server_tokens build; }
===
server { listen 127.0.0.1:19700; server_tokens "off"; }
===
server { listen 127.0.0.1:19700; location / { proxy_buffering off; proxy_buffers 8 4k; proxy_buffer_size 8k; proxy_busy_buffers_size 16k; } }
===
server { listen 127.0.0.1:19700; location / { proxy_buffers 8 4k; proxy_busy_buffers_size 64k; } }
===
server { listen 127.0.0.1:19700; location / { proxy_http_version 1.2; } }
===
server { listen 127.0.0.1:19700; location / { proxy_redirect default; proxy_redirect off; } }
===
server { listen 127.0.0.1:19700; location / { proxy_redirect http://a/ /; proxy_redirect ~^http://(.+)/ /$1/; proxy_redirect default; } }
===
server { listen 127.0.0.1:19700; location / { proxy_pass http://127.0.0.1:1; proxy_redirect default; } }
===
server { listen 127.0.0.1:19700; if ($request_method = "POST") { return 405; } }
===
server { listen 127.0.0.1:19700; if ($arg_a != "") { return 204; } if ( $arg_b = "" ) { } }
===
server { listen 127.0.0.1:19700; location / { if ($request_method = 'OPTIONS') { add_header Access-Control-Allow-Origin '*'; return 204; } } }
===
server { listen 127.0.0.1:19700; location / { limit_except get Post { deny all; } } }
===
server { listen 127.0.0.1:19700; location / { proxy_pass http://127.0.0.1:1; proxy_next_upstream error off; } }
===
server { listen 127.0.0.1:19700; location / { proxy_pass http://127.0.0.1:1; proxy_cookie_flags ~ secure samesite=strict; proxy_cookie_domain ~\.(?P<sl>[a-z]+)$ $sl; } }
===
server { listen 127.0.0.1:19700; location ~ ^/img/(.+)$ { alias /tmp/$1; } location /v/ { root /tmp/$host; } }
===
server { listen 127.0.0.1:19700; location / { if ($a) { proxy_pass http://127.0.0.1:1; } } }
