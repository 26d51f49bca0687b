#!/usr/bin/perl

# The realip module: set_real_ip_from, real_ip_header (X-Real-IP default,
# X-Forwarded-For), real_ip_recursive, $realip_remote_addr, untrusted peers.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http realip/)->plan(6);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        set_real_ip_from 127.0.0.0/8;

        location / { return 200 "$remote_addr $realip_remote_addr"; }
        # Location-level settings apply after the rewrite phase, as in
        # nginx (its preaccess phase): seen here by add_header, not return.
        location /xff {
            real_ip_header X-Forwarded-For;
            add_header X-Addr $remote_addr always;
        }
        location /rec {
            real_ip_header X-Forwarded-For;
            set_real_ip_from 127.0.0.0/8;
            set_real_ip_from 10.0.0.0/8;
            real_ip_recursive on;
            add_header X-Addr $remote_addr always;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        set_real_ip_from 192.0.2.1;
        location / { return 200 "$remote_addr"; }
    }
}

EOF

$t->run();

sub get {
	my ($uri, $hdr, %extra) = @_;
	my $r = http("GET $uri HTTP/1.0\nHost: localhost\n$hdr\n\n", %extra);
	return $1 if $r =~ /^X-Addr: (\S+)\r$/mi;
	my ($body) = $r =~ /\r\n\r\n(.*)$/s;
	return $body;
}

is(get('/', 'X-Real-IP: 192.0.2.7'), '192.0.2.7 127.0.0.1', 'X-Real-IP from a trusted peer');
is(get('/', ''), '127.0.0.1 127.0.0.1', 'no header: the peer');
is(get('/xff', 'X-Forwarded-For: 198.51.100.1, 10.0.0.5'), '10.0.0.5', 'X-Forwarded-For: the last address');
is(get('/rec', 'X-Forwarded-For: 198.51.100.1, 10.0.0.5'), '198.51.100.1', 'recursive skips trusted hops');
is(get('/rec', 'X-Forwarded-For: 10.0.0.9, 10.0.0.5'), '10.0.0.9', 'recursive, all trusted: the leftmost');
is(get('/', 'X-Real-IP: 192.0.2.7', PeerAddr => '127.0.0.1:' . port(8081)), '127.0.0.1', 'untrusted peer keeps its address');
